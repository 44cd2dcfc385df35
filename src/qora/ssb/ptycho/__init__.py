"""Iterative multislice ptychography, started from the direct fit (:mod:`qora.ssb.ptycho.run`).

- :mod:`qora.ssb.ptycho.model`: the forward model (probe modes through object slices, far-field intensity) and its
  exact gradient with respect to the slices, the probe and the positions;
- :mod:`qora.ssb.ptycho.solver`: the mini-batch solver (its steps, constraints and the regularisation along z);
- :mod:`qora.ssb.ptycho.start`: the measured amplitudes, positions and the first probe and slices;
- :mod:`qora.ssb.ptycho.run`: :func:`reconstruct` (one call from a scan and its fit) and :class:`PtychoResult`;
- :mod:`qora.ssb.ptycho.figures`: the result's figure and the solver's checkpoints.

This package is the iterative engine's face (as :mod:`qora.ssb.live` is the live one's): the command line imports
from here.
"""

from qora.ssb.ptycho.figures import load_state, plot_result, save_state
from qora.ssb.ptycho.model import Grid, forward, loss_and_gradients
from qora.ssb.ptycho.run import PtychoResult, fit_start, reconstruct
from qora.ssb.ptycho.solver import PtychoOptions, PtychoState, Problem, batch_size, iterate
from qora.ssb.ptycho.start import default_slices, initial_state, measured_problem

__all__ = ["Grid", "forward", "loss_and_gradients", "PtychoResult", "fit_start", "reconstruct", "PtychoOptions",
           "PtychoState", "Problem", "iterate", "batch_size", "default_slices", "initial_state", "measured_problem",
           "plot_result", "save_state", "load_state"]
