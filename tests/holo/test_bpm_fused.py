"""The BPM's fused_fft variant, on the CPU: its prebuilt module, the register order of its spectral
arrays, and its pass chain (the kernels' arithmetic written in NumPy, line transform by line
transform, with the kernels' index formulas) against the reference model in ``qora.holo.bpm``."""

import numpy as np
import pytest

from qora.holo import build_fused
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.bpm import _lateral_fft_layout, bpm_forward, bpm_gradient, bpm_vjp
from qora.holo.bpm_fused import COLUMN, COLUMN_BUILT, REVERSE_ROW, ROW, natural_order, spectral_order
from qora.holo.geometry import Geometry, cone_illuminations
from qora.holo.plans import bpm_tables
from qora.io.errors import InputError


def test_every_configured_pass_is_built():
    """Each (size, elements per thread, lines per block) the engine picks is instantiated in the .cu file."""
    source = (build_fused.KERNELS / "bpm_fused.cu").read_text()
    for n, (ept, lines) in COLUMN.items():
        for e in COLUMN_BUILT[n] + (ept,):
            assert f"QORA_BPM_COLUMN({n}, {e}, {lines})" in source
    for table in (ROW, REVERSE_ROW):
        for n, (ept, lines) in table.items():
            assert f"QORA_BPM_ROW({n}, {ept}, {lines})" in source


def _kernel_column_index(count, n, ept, lines):
    """Where the column pass reads spectral bin (a, ky, kx): blk n F + (e F + f) stride + tx (bpm_fused.cu)."""
    stride = n // ept
    a, ky, kx = np.meshgrid(np.arange(count), np.arange(n), np.arange(n), indexing="ij")
    blk = a * (n // lines) + kx // lines
    f, e, tx = kx % lines, ky // stride, ky % stride
    return blk * n * lines + (e * lines + f) * stride + tx


@pytest.mark.parametrize("n, ept, lines", [(128, 8, 16), (256, 16, 16), (256, 8, 16), (512, 16, 8), (16, 4, 2)])
def test_spectral_order_is_the_kernels_register_order(n, ept, lines):
    rng = np.random.default_rng(1)
    t = rng.standard_normal((3, n, n)) + 1j * rng.standard_normal((3, n, n))
    ordered = np.ascontiguousarray(spectral_order(t, ept, lines))
    assert np.array_equal(ordered.reshape(-1)[_kernel_column_index(3, n, ept, lines)], t)
    assert np.array_equal(natural_order(ordered, ept, lines), t)
    assert ordered[:, 0, 0].tolist() == t[:, 0, 0].tolist()  # bin (0, 0) first: S_0's delta stays at [a, 0, 0]


def test_auto_variant_rule():
    """"auto" is fused_fft only in the scan geometry, at a built lateral size, on compute capability 9.x."""
    from qora.holo.bpm_cuda import pick_variant

    assert pick_variant("auto", 256, rotation=False, capability="90") == "fused_fft"
    assert pick_variant("auto", 256, rotation=False, capability="80") == "cufft"
    assert pick_variant("auto", 200, rotation=False, capability="90") == "cufft"
    assert pick_variant("auto", 128, rotation=True, capability="90") == "cufft"
    assert pick_variant("cufft", 256, rotation=False, capability="90") == "cufft"
    assert pick_variant("fused_fft", 48, rotation=True) == "fused_fft"  # explicit: the model refuses it later
    with pytest.raises(InputError, match="variant"):
        pick_variant("fast", 256, rotation=False)


def test_spectral_order_refuses_a_shape_it_cannot_split():
    with pytest.raises(ValueError, match="divisible"):
        spectral_order(np.zeros((1, 24, 24)), 16, 4)


# -- the pass chain in NumPy ------------------------------------------------------------------------------------

def _fwd(v, axis):  # the line transforms: unnormalised, like cuFFTDx's
    return np.fft.fft(v, axis=axis)


def _inv(v, axis):
    return np.fft.ifft(v, axis=axis) * v.shape[axis]


def _centred_index(count, n):
    """The row passes' centre-origin address of (line = a n + y, x): (line - y + (y + n/2) % n) n + (x + n/2) % n."""
    line, x = np.meshgrid(np.arange(count * n), np.arange(n), indexing="ij")
    y = line % n
    return ((line - y + (y + n // 2) % n) * n + (x + n // 2) % n).reshape(count, n, n)


def _passes_forward(screens, tables, ept, lines, keep=False):
    """bpm_fused.cu's forward chain: W and S (in register order) through row_forward and column_forward."""
    cq, cr, lq, lr = (spectral_order(t, ept, lines) for t in tables.products(np.complex128))
    nz, n = screens.shape[0], screens.shape[-1]
    count = cq.shape[0]
    s = np.zeros((count, n, n), complex)
    s[:, 0, 0] = n * n
    w = np.zeros((count, n, n), complex)
    w[:, :, 0] = n * n
    stored = np.empty((nz, count, n, n), complex)
    for k in range(nz):
        v = _inv(w, -1) / (n * n)  # row_forward
        stored[k] = v
        w = _fwd(screens[k] * v, -1)
        tq, tr = (lq, lr) if k == nz - 1 else (cq, cr)  # column_forward
        a = spectral_order(_fwd(w, -2), ept, lines)
        s = tq * a + tr * s
        w = _inv(natural_order(s, ept, lines), -2)
    out = np.empty_like(w)
    out.reshape(-1)[_centred_index(count, n).reshape(-1)] = (_inv(w, -1) / (n * n)).reshape(-1)  # row_output
    return out, w, stored


def _passes_reverse(screens, tables, kd, ept, lines, data, residual):
    """The reverse chain: row_residual, then column_reverse and row_reverse per slice from the last."""
    out, w, stored = _passes_forward(screens, tables, ept, lines, keep=True)
    cq, cr, lq, lr = (spectral_order(t, ept, lines) for t in tables.products(np.complex128))
    nz, n = screens.shape[0], screens.shape[-1]
    scale = 1.0 / (n * n)
    centred = _centred_index(cq.shape[0], n)
    y = _inv(w, -1) * scale
    d = data.reshape(-1)[centred]  # the data read at the centre-origin address, in FFT layout
    r = d if residual else y - d
    loss = float(np.sum(np.abs(r) ** 2))
    w = _fwd(r, -1)
    g = np.zeros_like(w)
    grad = np.zeros((nz, n, n))
    for k in range(nz - 1, -1, -1):
        tq, tr = (lq, lr) if k == nz - 1 else (cq, cr)
        gp = spectral_order(_fwd(w, -2), ept, lines) + (0 if k == nz - 1 else g)  # column_reverse
        g = np.conj(tr) * gp
        w = _inv(natural_order(np.conj(tq) * gp * scale, ept, lines), -2)
        b = _inv(w, -1)  # row_reverse
        pw = screens[k] * stored[k]
        grad[k] += kd * np.sum(pw.real * b.imag - pw.imag * b.real, axis=0)
        w = _fwd(np.conj(screens[k]) * b, -1)
    return np.fft.fftshift(grad, axes=(-2, -1)), loss


@pytest.fixture(scope="module")
def case():
    n, nz = 16, 6
    df = 1.0 / (n * R.PIXEL)
    ill = np.concatenate([np.zeros((1, 2)), cone_illuminations(0.8, R.WAVELENGTH, 4, include_normal=False)])
    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, illuminations=np.round(ill / df) * df)
    vol = P.render_spheres([P.Sphere((0.0, 0.1, -0.2), 0.5, 1.40)], n, g.pixel, g.medium_index, supersample=3)
    x = (vol - g.medium_index)[n // 2 - nz // 2:n // 2 + nz // 2].astype(np.float64)
    tables = bpm_tables(g, nz)
    screens = np.exp(1j * tables.k0 * tables.step * _lateral_fft_layout(x))
    return g, x, tables, screens


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_pass_chain_forward_equals_the_model(case):
    g, x, tables, screens = case
    out, _, _ = _passes_forward(screens, tables, 4, 2)
    ref = bpm_forward(x, g)
    assert _rel(out - 1, ref - 1) < 1e-12


def test_pass_chain_reverse_equals_the_models_adjoint_and_gradient(case):
    g, x, tables, screens = case
    rng = np.random.default_rng(2)
    r = rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))
    kd = tables.k0 * tables.step
    grad, loss = _passes_reverse(screens, tables, kd, 4, 2, r, residual=True)
    assert _rel(grad, bpm_vjp(x, r, g)) < 1e-12
    assert loss == pytest.approx(float(np.sum(np.abs(r) ** 2)), rel=1e-12)
    data = bpm_forward(0.9 * x, g)
    grad, loss = _passes_reverse(screens, tables, kd, 4, 2, data, residual=False)
    ref, ref_loss = bpm_gradient(x, data, g, return_loss=True)
    assert _rel(grad / g.count, ref) < 1e-12
    assert loss / (2 * g.count) == pytest.approx(ref_loss, rel=1e-12)


def test_reverse_row_groups_cover_every_illumination_once():
    """row_reverse: block blk takes row blk // groups of illuminations (blk % groups) F + ty; those past the
    count run on zeros. Every (illumination, row) is one block's line exactly once."""
    for count in (1, 3, 4, 5, 49):
        for n, (_, lines) in REVERSE_ROW.items():
            groups = -(-count // lines)
            blk, ty = np.meshgrid(np.arange(n * groups), np.arange(lines), indexing="ij")
            y, a = blk // groups, (blk % groups) * lines + ty
            valid = a < count
            pairs = np.stack([a[valid], y[valid]], axis=1)
            assert len(pairs) == count * n and len(np.unique(pairs, axis=0)) == count * n


# -- the engine's launches on an emulated device ----------------------------------------------------------------
# BpmDevice(variant="fused_fft") run with NumPy standing in for CuPy and each kernel of bpm_fused.cu emulated block by block
# from its index formulas (vectorised over blocks): a wrong grid, argument order, buffer or table order in
# the engine shows up as a wrong field or gradient here, before any GPU runs it.


class _Array(np.ndarray):
    def get(self):
        return np.array(self)


class _FakeCupy:
    complex64, float32, float64 = np.complex64, np.float32, np.float64
    fft = np.fft

    class cuda:  # noqa: N801 - CuPy's name
        class Device:
            compute_capability = "90"
            mem_info = (2**34, 2**34)

        class Stream:  # the emulated kernels run at their call: a lane's stream orders nothing
            def __init__(self, non_blocking=False):
                self.waited = 0

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def wait_event(self, event):
                self.waited += 1

        class Event:
            def __init__(self, disable_timing=False):
                self.recorded = 0

            def record(self, stream=None):
                self.recorded += 1

        @classmethod
        def get_current_stream(cls):
            return cls.Stream()

    @staticmethod
    def asarray(a, dtype=None):
        return np.array(a, dtype=dtype).view(_Array)

    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, np.nan, dtype).view(_Array)  # NaN: a value never written shows

    @staticmethod
    def zeros(shape, dtype):
        return np.zeros(shape, dtype).view(_Array)


class _Kernel:
    def __init__(self, name):
        family, kind, n, lines, ept = name.split("_")[1:]
        self.family, self.kind, self.n, self.lines, self.ept = family, kind, int(n), int(lines), int(ept)

    def __call__(self, grid, block, args, shared_mem=0):
        n, lines, ept = self.n, self.lines, self.ept
        if self.kind == "params":
            args[0][:] = [n // ept, lines, 1, 1]
            return
        assert block == (n // ept, lines) and shared_mem == getattr(self, "max_dynamic_shared_size_bytes", None)
        blk = np.arange(grid[0])
        getattr(self, f"_{self.family}_{self.kind}")(blk, *args)

    def _column(self, blk, w, s, tq, tr, scale, first, reverse):
        n, lines, stride = self.n, self.lines, self.n // self.ept
        b, bx = blk // (n // lines), blk % (n // lines)
        j, f = np.arange(n)[None, :, None], np.arange(lines)[None, None, :]
        at_w = b[:, None, None] * n * n + j * n + bx[:, None, None] * lines + f
        at_q = blk[:, None, None] * n * lines + ((j // stride) * lines + f) * stride + j % stride
        wf, sf, q, r = w.reshape(-1), s.reshape(-1), tq.reshape(-1)[at_q], tr.reshape(-1)[at_q]
        a = np.fft.fft(wf[at_w], axis=1)
        if not reverse:
            new = q * a + r * sf[at_q]
            sf[at_q] = new
        else:
            g = a if first else a + sf[at_q]
            sf[at_q] = np.conj(r) * g
            new = np.conj(q) * g * scale
        wf[at_w] = np.fft.ifft(new, axis=1) * n

    def _column_forward(self, blk, w, s, tq, tr):
        self._column(blk, w, s, tq, tr, 1.0, 0, False)

    def _column_reverse(self, blk, w, g, tq, tr, scale, first):
        self._column(blk, w, g, tq, tr, scale, first, True)

    def _lines(self, blk):
        line = (blk[:, None] * self.lines + np.arange(self.lines)[None, :]).reshape(-1)
        x = np.arange(self.n)[None, :]
        return line, line[:, None] % self.n, x

    def _centred(self, line, y, x):
        n = self.n
        return (line[:, None] - y + (y + n // 2) % n) * n + (x + n // 2) % n

    def _row_forward(self, blk, w, screen, scale, stored):
        line, y, x = self._lines(blk)
        wf = w.reshape(-1)
        v = np.fft.ifft(wf[line[:, None] * self.n + x], axis=1) * self.n * scale
        if isinstance(stored, np.ndarray):
            stored.reshape(-1)[line[:, None] * self.n + x] = v
        wf[line[:, None] * self.n + x] = np.fft.fft(screen.reshape(-1)[y * self.n + x] * v, axis=1)

    def _row_output(self, blk, w, scale, out):
        line, y, x = self._lines(blk)
        v = np.fft.ifft(w.reshape(-1)[line[:, None] * self.n + x], axis=1) * self.n * scale
        out.reshape(-1)[self._centred(line, y, x)] = v

    def _row_residual(self, blk, w, data, scale, loss):
        line, y, x = self._lines(blk)
        wf = w.reshape(-1)
        d = data.reshape(-1)[self._centred(line, y, x)]
        v = np.fft.ifft(wf[line[:, None] * self.n + x], axis=1) * self.n * scale
        r = v - d if scale != 0 else d
        loss[0] += float(np.sum(np.abs(r) ** 2))
        wf[line[:, None] * self.n + x] = np.fft.fft(r, axis=1)

    def _row_reverse(self, blk, w, screen, stored, count, kd, grad):
        n, lines = self.n, self.lines
        groups = -(-int(count) // lines)
        y = np.repeat(blk // groups, lines)[:, None]
        a = ((blk[:, None] % groups) * lines + np.arange(lines)[None, :]).reshape(-1)[:, None]
        valid = (a < count)[:, 0]
        y, a = y[valid], a[valid]
        x = np.arange(n)[None, :]
        at = (a * n + y) * n + x
        wf = w.reshape(-1)
        bv = np.fft.ifft(wf[at], axis=1) * n
        p = screen.reshape(-1)[y * n + x]
        pw = p * stored.reshape(-1)[at]
        np.add.at(grad.reshape(-1), y * n + x, kd * (pw.real * bv.imag - pw.imag * bv.real))
        wf[at] = np.fft.fft(np.conj(p) * bv, axis=1)


class _FakeModule:
    def get_function(self, name):
        return _Kernel(name)


class _NoWorkArea:
    def plan(self, *args, **kwargs):
        raise AssertionError("the fused variant makes no cuFFT plans")

    def allocate(self):
        pass


def emulate_device(monkeypatch, variant_module, module):
    """The emulated CuPy everywhere a fused variant reaches it (bpm_cuda, bpm_fused's shared helpers and the
    variant's own module), no cuFFT work area, and ``module`` for the variant's cubin."""
    from qora.holo import bpm_cuda, bpm_fused

    fake = _FakeCupy()
    for m in {bpm_cuda, bpm_fused, variant_module}:
        monkeypatch.setattr(m, "cupy", lambda: fake)
    monkeypatch.setattr(bpm_cuda, "WorkArea", _NoWorkArea)
    monkeypatch.setattr(variant_module, "load_cubin", lambda package, name: module)
    return fake


@pytest.fixture
def emulated(monkeypatch):
    from qora.holo import bpm_fused

    fake = emulate_device(monkeypatch, bpm_fused, _FakeModule())
    monkeypatch.setitem(bpm_fused.COLUMN, 16, (4, 2))  # the kernels' arithmetic is size-free: emulate at 16^2
    monkeypatch.setitem(bpm_fused.COLUMN_BUILT, 16, (4,))
    monkeypatch.setitem(bpm_fused.ROW, 16, (4, 4))
    monkeypatch.setitem(bpm_fused.REVERSE_ROW, 16, (2, 2))
    monkeypatch.setattr(bpm_fused, "SIZES", (16,))
    monkeypatch.setattr(bpm_fused, "GRAPHS", False)  # no CUDA graphs on the emulated device
    return fake


@pytest.mark.parametrize("chunk, lanes", [(5, 1), (2, 1), (5, 2), (5, 3)])
def test_engine_on_an_emulated_device_equals_the_model(case, emulated, monkeypatch, chunk, lanes):
    """Lanes split each chunk's passes by illumination (chunk 5: groups of 2 + 3 and 2 + 2 + 1 with the
    emulation's reverse blocks of 2); every group's grid, views and count must still cover the chunk once."""
    from qora.holo import bpm_fused

    monkeypatch.setitem(bpm_fused.LANES, 16, lanes)
    errors = emulated_engine_errors(case, emulated, chunk, "fused_fft")
    assert max(errors.values()) < 1e-5, errors


def emulated_engine_errors(case, emulated, chunk, variant) -> dict:
    """A BpmDevice of ``variant`` on the emulated device against the model, as relative errors: the
    fields, J^T r with the residual given and its loss, and the gradient and loss over a subset of
    illuminations (the model's mean and half-mean; the device's sums)."""
    from qora.holo.bpm_cuda import BpmDevice

    g, x, tables, screens = case
    dev = BpmDevice(g, tables, chunk=chunk, variant=variant)
    dev.screens[...] = screens.astype(np.complex64)
    out = emulated.empty((g.count, g.n, g.n), np.complex64)
    dev.forward(out)
    errors = {"fields": _rel(np.asarray(out) - 1, bpm_forward(x, g) - 1)}
    rng = np.random.default_rng(3)
    r = (rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))).astype(np.complex64)
    grad, loss = dev.reverse(emulated.asarray(r), residual=True)
    errors["vjp"] = _rel(np.asarray(grad), bpm_vjp(x, r, g))
    norm = float(np.sum(np.abs(r) ** 2))
    errors["vjp_loss"] = abs(loss - norm) / norm
    data = bpm_forward(0.9 * x, g).astype(np.complex64)
    index = slice(1, 5)
    grad, loss = dev.reverse(emulated.asarray(data), index)
    ref, ref_loss = bpm_gradient(x, data, g, index=index, return_loss=True)
    errors["gradient"] = _rel(np.asarray(grad) / 4, ref)
    errors["loss"] = abs(loss / 8 - ref_loss) / ref_loss
    return errors


def test_cli_bpm_variant_is_refused_where_it_does_nothing(tmp_path):
    from click.testing import CliRunner

    from qora.cli import cli

    runner = CliRunner()
    path = tmp_path / "b.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "4", "--model", "bpm",
                              "--spheres", "0,0,0,0.8,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--method", "bpm", "--iterations", "2", "--backend",
                              "cpu", "--bpm-variant", "fused_fft", "--out", str(tmp_path / "v.h5"), "--quiet"])
    assert out.exit_code == 2 and "--bpm-variant" in out.output and "CPU" in out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--method", "gp", "--bpm-variant", "fused_fft",
                              "--out", str(tmp_path / "v.h5"), "--quiet"])
    assert out.exit_code == 2 and "does not use --bpm-variant" in out.output


def test_rotation_geometry_on_an_emulated_device_equals_the_cpu_path(emulated, monkeypatch):
    """The CUDA path of the rotation geometry (RotatedBpmDevice around the fused BpmDevice) end to end on the
    emulated device, the turn and the screens by their host references: forward, gradient and an inversion equal
    the CPU path's. The inversion reads the device's ``variant`` and ``chunk`` (it once raised AttributeError)."""
    from types import SimpleNamespace

    from qora.holo import bpm, bpm_cuda, bpm_rotation_cuda
    from qora.holo import kernels as K
    from qora.holo.geometry import rotation_axis
    from qora.holo.rotate import rotate, rotate_adjoint

    def turn(*, volume, rotation, out):
        out[...] = rotate(np.asarray(volume, np.float32), rotation)

    def turn_back(*, lab, rotation, out):
        out += rotate_adjoint(np.asarray(lab, np.float32), rotation).astype(np.float32)

    def screens(*, x, nz, n, kd, screens):  # holo.cu's bpm_screens: the FFT layout of exp(i kd x)
        screens[...] = np.exp(1j * kd * np.fft.ifftshift(np.asarray(x), axes=(-2, -1)))

    emulated.empty_like = lambda a: emulated.empty(a.shape, a.dtype)
    emulated.maximum = np.maximum
    monkeypatch.setattr(bpm_rotation_cuda, "cupy", lambda: emulated)
    monkeypatch.setattr(bpm_rotation_cuda, "KR", SimpleNamespace(rotate=turn, rotate_adjoint=turn_back))
    monkeypatch.setattr(K, "bpm_screens", screens)
    n, nz = 16, 6
    angles = np.sort(np.random.default_rng(4).uniform(0, 2 * np.pi, 3))
    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, angles=angles, axis=rotation_axis(0.2),
                 rotation_sense=-1)
    vol = P.render_spheres([P.Sphere((0.1, 0.1, -0.2), 0.5, 1.40)], n, g.pixel, g.medium_index, supersample=3)
    x = (vol - g.medium_index)[n // 2 - nz // 2:n // 2 + nz // 2].astype(np.float32)
    assert _rel(bpm_cuda.bpm_forward(x, g, variant="fused_fft") - 1, bpm_forward(x, g) - 1) < 1e-5
    data = bpm_forward(np.float32(0.8) * x, g).astype(np.complex64)
    grad, loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True, variant="fused_fft")
    ref, ref_loss = bpm_gradient(x, data, g, return_loss=True)
    assert _rel(np.asarray(grad), ref) < 1e-5 and loss == pytest.approx(ref_loss, rel=1e-5)
    start = np.zeros_like(x)
    gpu = bpm_cuda.bpm_reconstruct(data, g, start=start, iterations=3, variant="fused_fft")
    cpu = bpm.bpm_reconstruct(data, g, start=start, iterations=3)
    assert gpu.info["variant"] == "fused_fft" and gpu.info["chunk"] == 1
    assert _rel(gpu.index - g.medium_index, cpu.index - g.medium_index) < 1e-4
    np.testing.assert_allclose(gpu.info["loss"], cpu.info["loss"], rtol=1e-5)
