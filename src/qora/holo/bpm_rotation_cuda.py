"""The beam propagation model in the rotation geometry on CUDA: :class:`qora.holo.bpm_cuda.BpmDevice`
of the one normal incidence, run once per angle through the object turned into its pose.

The same model as the CPU path (:mod:`qora.holo.bpm`, rotation geometry): per angle a the device
turns the object-frame contrast into its pose R_a by trilinear interpolation (``rotate.cu``), sets
the screens, runs the slices of :class:`~qora.holo.bpm_cuda.BpmDevice` (its kernels untouched), and
in the reverse pass scatters the lab-frame gradient back by the exact adjoint of the turn. Memory:
the device of one illumination plus two volumes (the posed contrast and the gradient).
"""

from __future__ import annotations

from qora.holo.cuda_stages import cupy
from qora.holo.geometry import Geometry
from qora.holo.kernels import rotate as KR

__all__ = ["RotatedBpmDevice"]


class RotatedBpmDevice:
    """The interface of :class:`~qora.holo.bpm_cuda.BpmDevice` (``set_contrast``, ``forward``, ``reverse``,
    ``chunk``) for a rotation geometry, around ``device``: the BpmDevice of its one normal incidence
    (``lab_geometry``, the one table of ``bpm_tables``), with chunks of one illumination."""

    def __init__(self, geometry: Geometry, device) -> None:
        cp = cupy()
        self.geometry, self.count, self.nz, self.n = geometry, geometry.count, device.nz, device.n
        self.device = device
        self.variant = device.variant  # bpm_reconstruct reports it in its info
        self.chunk = 1  # one angle at a time: each has its own screens
        self.rotations = [geometry.rotation(a) for a in range(geometry.count)]
        shape = (device.nz, device.n, device.n)
        self.posed = cp.empty(shape, cp.float32)
        self.grad = cp.empty(shape, cp.float32)
        self.x = None

    def set_contrast(self, x) -> None:
        """The object-frame contrast x (nz, n, n) float32 on the device, centre-origin (kept, not copied)."""
        if tuple(x.shape) != self.posed.shape:
            raise ValueError(f"contrast must be {self.posed.shape}, got {tuple(x.shape)}")
        self.x = x

    def _pose(self, a: int) -> None:
        KR.rotate(volume=self.x, rotation=self.rotations[a], out=self.posed)
        self.device.set_contrast(self.posed)

    def forward(self, out) -> None:
        """Field ratios (A, n, n) complex64, centre-origin, into the device array ``out``."""
        for a in range(self.count):
            self._pose(a)
            self.device.forward(out[a:a + 1])

    def reverse(self, data, index=slice(None), *, residual: bool = False):
        """Re(J^H r) summed over the angles ``index`` in the object frame (nz, n, n) float32, and sum |r|^2
        (as :meth:`BpmDevice.reverse`)."""
        start, stop, _ = index.indices(self.count)
        self.grad.fill(0)
        loss = 0.0
        for a in range(start, stop):
            self._pose(a)
            g, part = self.device.reverse(data[a:a + 1], slice(0, 1), residual=residual)
            KR.rotate_adjoint(lab=g, rotation=self.rotations[a], out=self.grad)
            loss += part
        return self.grad, loss

