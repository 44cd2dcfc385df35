"""The BPM's fused_resident variant on the CPU: its prebuilt module, and its engine
(:class:`qora.holo.bpm_resident.ResidentSteps`: the arguments, buffers, table order and chunks it hands to
the kernels) on an emulated device whose resident kernels run the slice loop of each cluster with the
fused passes' NumPy kernels (the same algebra; the register order with R = n / cluster lines), against
the reference model."""

import numpy as np
import pytest

from qora.holo import build_fused

from test_bpm_fused import _Kernel, case, emulate_device, emulated_engine_errors  # noqa: F401 - case is a fixture

EPT, CLUSTER = 4, 4  # the emulated layout at 16^2: R = 4 lines per CTA


def test_every_configured_layout_is_built():
    from qora.holo.bpm_resident import CTAS_PER_SM, LAYOUTS

    source = (build_fused.KERNELS / "bpm_resident.cu").read_text()
    for n, (ept, cluster) in LAYOUTS.items():
        for ctas in CTAS_PER_SM[n]:
            assert f"QORA_BPM_RESIDENT({n}, {ept}, {cluster}, {ctas})" in source


class _ResidentKernel:
    """bpm_resident_<kind>_<n>_<C>_<EPT>_<CTAs per SM>: one cluster of C CTAs per illumination, the slice
    loop run with the fused passes' emulated kernels (rows, and columns in the register order of R lines)."""

    def __init__(self, name):
        kind, n, c, ept, _ = name.split("_")[2:]
        self.kind, self.n, self.cluster, self.ept = kind, int(n), int(c), int(ept)
        self.lines = self.n // self.cluster
        self.column = _Kernel(f"bpm_column_forward_{n}_{self.lines}_{ept}")
        self.row = _Kernel(f"bpm_row_forward_{n}_{self.lines}_{ept}")

    def __call__(self, grid, block, args, shared_mem=0):
        n, lines = self.n, self.lines
        if self.kind == "params":
            args[0][:] = [n // self.ept, lines, 1000, self.cluster]
            return
        assert block == (n // self.ept, lines) and shared_mem == self.max_dynamic_shared_size_bytes
        assert grid[0] % self.cluster == 0
        getattr(self, f"_{self.kind}")(grid[0] // self.cluster, *args)

    def _forward_slices(self, b, s, screens, cq, cr, lq, lr, nz, scale, stored=None, stored_slice=0):
        n = self.n
        w = np.zeros((b, n, n), np.complex128)
        w[:, :, 0] = n * n  # F_y^-1 S_0, the kernel's start
        rows, columns = np.arange(b * n // self.row.lines), np.arange(b * n // self.lines)
        for k in range(int(nz)):
            keep = None if stored is None else stored.reshape(-1)[k * stored_slice:k * stored_slice + b * n * n]
            self.row._row_forward(rows, w, screens[k], scale, keep)
            last = k == nz - 1
            self.column._column_forward(columns, w, s, lq if last else cq, lr if last else cr)
        return w, rows, columns

    def _forward(self, b, s, screens, cq, cr, lq, lr, nz, scale, out):
        w, rows, _ = self._forward_slices(b, s, screens, cq, cr, lq, lr, nz, scale)
        self.row._row_output(rows, w, scale, out)

    def _gradient(self, b, s, screens, cq, cr, lq, lr, nz, scale, stored, stored_slice, data, residual_scale, loss,
                  kd, grad):
        n = self.n
        w, rows, columns = self._forward_slices(b, s, screens, cq, cr, lq, lr, nz, scale, stored, int(stored_slice))
        self.row._row_residual(rows, w, data, residual_scale, loss)
        # the reverse row pass of the fused kernels groups illuminations; one line per block here
        reverse = _Kernel(f"bpm_row_reverse_{n}_1_{self.ept}")
        for k in range(int(nz) - 1, -1, -1):
            last = k == nz - 1
            self.column._column_reverse(columns, w, s, lq if last else cq, lr if last else cr, scale, int(last))
            keep = stored.reshape(-1)[k * int(stored_slice):k * int(stored_slice) + b * n * n]
            reverse._row_reverse(np.arange(n * b), w, screens[k], keep, b, kd, grad[k])


class _ResidentModule:
    def get_function(self, name):
        return _ResidentKernel(name)


@pytest.fixture
def emulated(monkeypatch):
    from qora.holo import bpm_resident

    fake = emulate_device(monkeypatch, bpm_resident, _ResidentModule())
    monkeypatch.setitem(bpm_resident.LAYOUTS, 16, (EPT, CLUSTER))  # the algebra is size-free: emulate at 16^2
    monkeypatch.setitem(bpm_resident.CTAS_PER_SM, 16, (2,))
    return fake


@pytest.mark.parametrize("chunk", [5, 2])
def test_engine_on_an_emulated_device_equals_the_model(case, emulated, chunk):
    """Chunks of 2 make grids of 2 and 1 clusters and a stored-envelope buffer wider than the last chunk."""
    errors = emulated_engine_errors(case, emulated, chunk, "fused_resident")
    assert max(errors.values()) < 1e-5, errors


def test_sizes_and_settings_it_refuses(case, emulated):
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_resident import ResidentSteps
    from qora.io.errors import InputError

    g, _, tables, _ = case
    dev = BpmDevice(g, tables, variant="fused_resident")
    with pytest.raises(InputError, match="ctas_per_sm"):
        ResidentSteps(dev, ctas_per_sm=1)
    emulated.cuda.Device.compute_capability = "80"
    try:
        with pytest.raises(InputError, match="compute capability"):
            ResidentSteps(dev)
    finally:
        emulated.cuda.Device.compute_capability = "90"
