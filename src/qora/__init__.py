"""Qora: coherent imaging reconstruction on CPUs and NVIDIA GPUs.

Three engines share one core:

- :mod:`qora.phase`: CDI phase retrieval from far-field intensities;
- :mod:`qora.holo`: optical diffraction tomography from off-axis holograms;
- :mod:`qora.ssb`: 4D-STEM direct ptychography (SSB, parallax, thick-sample fits).

Importing :mod:`qora` never imports CuPy and compiles no GPU code; the GPU is
reached through :func:`qora.backend.resolve`.
"""

from qora._version import __version__

__all__ = ["__version__"]
