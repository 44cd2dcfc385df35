"""What the layered qora.ssb gives beyond the old modules: newton's callback, the optimisers on any
object of their small protocols, the session's band cache behind its public methods, the free
uncertainties shared with the sharded band, and the face."""

import numpy as np
import pytest

import qora.ssb as ssb
from qora.ssb import (Aberrations, BatchObjective, Band, NewtonState, Objective, Session, amorphous_slices,
                      defocus_search, newton, simulate, tpe_search, uncertainties)


class Quadratic:
    """A toy agreement with its peak at ``peak``: both protocols, no Session."""

    parameters = ("C10", "C12a")

    def __init__(self, peak=(120.0, -7.0)):
        self.peak = np.array(peak)
        self.hess = -np.array([[2e-4, 3e-5], [3e-5, 5e-4]])
        self.full = []  # the values of each evaluation with derivatives

    def _value(self, values):
        d = np.array([values[p] for p in self.parameters]) - self.peak
        return 0.9 + 0.5 * d @ self.hess @ d, d

    def evaluate(self, values, *, order=2):
        value, d = self._value(values)
        if order == 0:
            return value
        self.full.append(dict(values))
        return value, self.hess @ d, self.hess

    def evaluate_batch(self, sets):
        return np.array([self._value({**{"C12a": 0.0}, **v})[0] for v in sets])


def test_toys_satisfy_the_protocols():
    toy = Quadratic()
    assert isinstance(toy, Objective) and isinstance(toy, BatchObjective)
    assert not isinstance(object(), Objective)


def test_newton_calls_back_once_per_accepted_step():
    toy = Quadratic()
    states = []
    values, agreement, _ = newton(toy, {"C10": 0.0, "C12a": 0.0}, callback=states.append)
    assert states, "the fit took no step"
    assert all(isinstance(s, NewtonState) for s in states)
    assert [s.step for s in states] == list(range(1, len(states) + 1))
    # the start's evaluation, then one evaluation with derivatives per accepted step, each reported
    assert len(toy.full) == len(states) + 1
    for state, evaluated in zip(states, toy.full[1:]):
        assert state.values == evaluated
    assert [s.agreement for s in states] == sorted(s.agreement for s in states)
    assert states[-1].values == values and states[-1].agreement == agreement
    np.testing.assert_allclose([values["C10"], values["C12a"]], toy.peak, rtol=1e-6)
    # without a callback the same result
    again = newton(Quadratic(), {"C10": 0.0, "C12a": 0.0})
    assert again[0] == values and again[1] == agreement


def test_searches_run_on_a_toy_batch_objective():
    toy = Quadratic(peak=(130.0, 0.0))
    c10, values = defocus_search(toy, step=10.0)
    assert c10 == 130.0 and len(values) == 101
    best, agreement, trials, agreements = tpe_search(toy, {"C10": (-500.0, 500.0)}, trials=64, seed=3)
    assert agreement == agreements.max() and len(trials) == 64 and best["C10"] == trials[agreements.argmax(), 0]
    assert agreement == pytest.approx(toy.evaluate_batch([best])[0], rel=1e-15)
    assert abs(best["C10"] - 130.0) < np.median(np.abs(trials[:, 0] - 130.0))  # the search moved toward the peak


@pytest.fixture(scope="module")
def session():
    sim = simulate(amorphous_slices((64, 64), 0.2, seed=2), pixel=0.2, stride=2, window=64, kv=300.0,
                   alpha_mrad=20.0, aberrations=Aberrations(C10=120.0))
    return Session(sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)


def test_the_band_cache_is_the_sessions(session):
    session.clear_band_cache()
    assert session.band_cache_bytes == 0
    band = Band(session, ("C10",))
    assert session.band_cache_bytes == band.G.nbytes > 0
    qy, qx = session.q_half(0.0)
    keep = np.zeros(qy.shape, bool)
    keep[1:3, 1:3] = True
    rows, total = session.band_rows(keep, on_device=False)
    assert rows.shape == (4, len(session.bf_index))
    assert total == pytest.approx(float(np.sum(np.abs(session.host_G()[keep]) ** 2)), rel=1e-12)
    assert session.band_rows(keep, on_device=False)[0] is rows  # kept: the same rows, not a new gather
    assert session.band_cache_bytes == rows.nbytes
    session.clear_band_cache()
    assert session.band_cache_bytes == 0
    assert session.band_rows(keep, on_device=False)[0] is not rows


def test_uncertainties_are_one_free_function(session):
    band = Band(session, ("C10", "C12a", "C12b"))
    values = {"C10": 110.0, "C12a": 1.0, "C12b": -1.0}
    agreement, _, hessian = band.evaluate(values)
    free = uncertainties(agreement, hessian, total=band.total, shape=band.shape, parameters=band.parameters)
    assert band.uncertainties(agreement, hessian) == free
    assert set(free) == set(band.parameters) and all(0 < v < np.inf for v in free.values())


def test_the_seam_picks_the_array_code_on_the_cpu(session):
    assert session._pick(session._sums_arrays, session._sums_kernel) == session._sums_arrays
    assert session._pick(session._mean_phase_arrays, session._mean_phase_half) == session._mean_phase_arrays


def test_the_face():
    assert ssb.fit is ssb.fit_session
    from qora.ssb.fitting import fit_rotation, fit_session

    assert fit_session is ssb.fit and fit_rotation is ssb.fit_rotation
    assert callable(ssb.simulate) and ssb.Session is Session
    assert set(ssb.__all__) <= set(dir(ssb))


def test_each_launcher_names_its_reference():
    from qora.ssb import kernels

    launchers = ("ssb_sums", "chi_pixels", "loss_half", "loss_moments", "parallax_fine", "band_batch",
                 "band_quad_batch", "band_quad_standard", "band_quad_derivatives", "agreement_sum",
                 "incoherent_transfers", "incoherent_sums", "double_overlap", "bslz4_gather", "ptycho_transmit",
                 "ptycho_slice_adjoint", "ptycho_far_weight", "ptycho_probe_sums",
                 "ptycho_object_step")
    compiled = {name.split("<")[0] for names in kernels._MODULES.values() for name in names}
    assert compiled == set(launchers) - {"agreement_sum"}  # one launcher per compiled kernel (and the reduction)
    for name in launchers:
        assert "Reference:" in getattr(kernels, name).__doc__, name


def test_no_module_of_the_face_shares_a_functions_name():
    """``import qora.ssb.fit`` must not hand back a function: the face's functions and its modules differ in name."""
    import importlib
    import pkgutil

    import qora.ssb as face

    modules = {m.name for m in pkgutil.iter_modules(face.__path__)}
    functions = {name for name in dir(face) if callable(getattr(face, name)) and not isinstance(getattr(face, name), type)}
    assert not modules & functions, modules & functions
    assert importlib.import_module("qora.ssb.fitting").fit_session is face.fit
    assert importlib.import_module("qora.ssb.simulation").simulate is face.simulate


def test_reoriented_copies_share_the_band_cache(session):
    """A fit's orientation check and its work session are reoriented copies: they gather no band of
    their own (at full scale 2.9 GiB more in the pool), and a new band replaces the old one."""
    from qora.ssb.orientation import reorient

    session.clear_band_cache()
    turned = reorient(session, "transpose")
    band = Band(turned, ("C10",))
    assert session.band_cache_bytes == band.G.nbytes > 0
    assert Band(session, ("C10",)).G is band.G  # the copy's gather is the session's
    Band(session, ("C10",), band=(0.3, 0.8))
    assert session.band_cache_bytes == turned.band_cache_bytes < band.G.nbytes  # one band held, not two
    turned.clear_band_cache()
    assert session.band_cache_bytes == 0
