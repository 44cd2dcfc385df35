"""The GP loop's fused_fft on the CPU: its prebuilt module, and its engine (:class:`qora.holo.gp_fused.FusedGP`:
the passes, their order, the row layout and the real volume it leaves) on emulated kernels that do each pass's
algebra with NumPy in float64, against the GP loop written with whole 3D real transforms."""

import numpy as np
import pytest

from qora.holo import build_fused
from qora.holo import gp_fused


def reference_gp(a, counts, iterations, scale, bounds):
    """GP on the half spectrum (n, n, n / 2 + 1) in float64 with whole transforms, unnormalised as cuFFT's: the
    real volume after the last restore, before its scale (what FusedGP.run leaves)."""
    n = a.shape[0]
    shape = (n, n, n)
    e = a.astype(np.complex128)
    b = 1.0 - 0.5 * counts
    for _ in range(iterations):
        v = np.clip(scale * np.fft.irfftn(e, s=shape, axes=(0, 1, 2)) * n**3, *bounds)
        e = a + b * np.fft.rfftn(v)
    return np.fft.irfftn(e, s=shape, axes=(0, 1, 2)) * n**3


def problem(n, seed=0, sparse=False):
    """A data term a (the half spectrum of a real volume with a non-negative part) and counts in {0, 1, 2}; with
    ``sparse``, as measured data are: most z-lines (y, x) hold no measured bin, and a is 0 where the counts are."""
    rng = np.random.default_rng(seed)
    volume = rng.standard_normal((n, n, n)) + 0.5
    a = np.fft.rfftn(volume)
    counts = rng.integers(0, 3, a.shape).astype(np.uint8)
    if sparse:  # measured bins on the lines of a low-frequency lateral patch only (|ky| < n / 4, kx < n / 4)
        y, x = np.meshgrid(np.fft.fftfreq(n) * n, np.arange(a.shape[2]), indexing="ij")
        counts *= ((np.abs(y) < n / 4) & (x < n / 4)).astype(np.uint8)
        a[counts == 0] = 0
    return a, counts


def padded(x, stride):
    """A half spectrum (n, n, w) in rows of ``stride`` values (the fused loop's layout), flattened."""
    out = np.zeros(x.shape[:2] + (stride,), x.dtype)
    out[..., :x.shape[2]] = x
    return out.reshape(-1)


class _Emulated:
    """gp_<kind>_<n>_<F>_<EPT> in NumPy float64: each pass's transforms along its axis, unnormalised."""

    def __init__(self, kind, n):
        self.kind, self.n = kind, n

    def __call__(self, grid, block, args, shared_mem=0):
        n = self.n
        if self.kind.startswith("rows"):
            # every row, once: the packed x pass takes two rows a transform
            assert grid[0] * block[1] * (2 if self.kind == "rows_packed" else 1) == n * n
            e, stride = args[0], int(args[1])
            half = e.reshape(n, n, stride)[..., :n // 2 + 1]
            v = np.fft.irfft(half, n=n, axis=-1) * n
            if self.kind == "rows_final":
                e.view(np.float64).reshape(n, n, 2 * stride)[..., :n] = v
            else:
                scale, lower, upper = (float(x) for x in args[2:5])
                half[...] = np.fft.rfft(np.clip(scale * v, lower, upper), axis=-1)
            return
        e, rows, width, stride = args[0], int(args[1]), int(args[2]), int(args[3])
        view = e.reshape(n, n, stride)[..., :width]
        axis = 0 if rows == n else 1  # z (R = n) or y (R = 1)
        if self.kind == "inverse":
            assert grid[0] == n * -(-width // block[1])  # every line, once
            view[...] = np.fft.ifft(view, axis=axis) * n
        elif self.kind == "forward":
            assert grid[0] == n * -(-width // block[1])
            view[...] = np.fft.fft(view, axis=axis)
        else:  # the z pass with the restore, on the listed tiles: lines x = g F .. g F + F - 1 at row y
            a, counts = (x.reshape(n, n, stride)[..., :width] for x in args[4:6])
            tiles, lines = args[6], block[1]
            assert grid[0] == len(tiles) and len(set(tiles.tolist())) == len(tiles)
            self.restored.extend(tiles.tolist())
            groups = -(-width // lines)
            norm = float(args[7])
            for t in tiles.tolist():
                y, x = t // groups, slice(t % groups * lines, t % groups * lines + lines)
                restored = a[:, y, x] + (1.0 - 0.5 * counts[:, y, x]) * np.fft.fft(view[:, y, x], axis=0)
                view[:, y, x] = np.fft.ifft(restored, axis=0) * n * norm

    restored: list = []  # the restore's tiles, over all its launches


def emulated_engine(n, packed=False):
    engine = object.__new__(gp_fused.FusedGP)
    engine.packed = packed
    ept, lines = gp_fused.LAYOUT[n]
    engine.n, engine.lines, engine.block = n, lines, (n // ept, lines)
    engine.width, engine.stride = n // 2 + 1, gp_fused.row_stride(n)
    engine.tiles = n * -(-engine.width // lines)
    engine.smem = dict.fromkeys(("inverse", "forward", "restore", "rows", "rows_final", "rows_packed"), 0)
    engine.kernels = {kind: _Emulated(kind, n) for kind in engine.smem}
    return engine


def test_every_layout_is_built():
    source = (build_fused.KERNELS / "gp_fused.cu").read_text()
    for n, (ept, lines) in gp_fused.LAYOUT.items():
        assert f"QORA_GP({n}, {ept}, {lines})" in source


@pytest.mark.parametrize("n", [128])
def test_row_stride_starts_every_block_on_a_line(n):
    stride = gp_fused.row_stride(n)
    assert stride >= n // 2 + 1 and stride % gp_fused.LAYOUT[n][1] == 0 and (8 * stride) % 128 == 0


@pytest.mark.parametrize("bounds,packed,sparse", [((0.0, np.inf), False, False), ((-0.25, 0.375), False, False),
                                                  ((-0.25, 0.375), True, False), ((-0.25, 0.375), True, True)])
def test_the_engine_runs_the_gp_loop(bounds, packed, sparse):
    """The engine's passes (z back from the data, then per iteration y back, x, y forward, z with the restore on the
    tiles that hold a measured bin; y back and the final C2R) on emulated kernels equal GP with whole 3D transforms,
    in the padded row layout: also where most lines hold no measured bin, and the restore skips their tiles."""
    n, iterations = 32, 4
    gp_fused.LAYOUT[n] = (4, 16)  # an emulated size: the layout only sets the row stride here
    _Emulated.restored = []
    try:
        engine = emulated_engine(n, packed)
        a, counts = problem(n, sparse=sparse)
        e = padded(a, engine.stride)
        scale = engine.run(e, padded(a, engine.stride), padded(counts, engine.stride), iterations, 1.0 / n**3, bounds)
    finally:
        del gp_fused.LAYOUT[n]
    got = e.view(np.float64).reshape(n, n, 2 * engine.stride)[..., :n] * scale * n**3  # the reference's scale
    want = reference_gp(a, counts, iterations, 1.0 / n**3, bounds)
    assert np.abs(got - want).max() <= 1e-9 * np.abs(want).max()
    free = reference_gp(a, counts, iterations, 1.0 / n**3, (-np.inf, np.inf))
    assert np.abs(free - want).max() > 1e-3 * np.abs(want).max()  # the clamp binds: skipping it would show
    tiles = n * -(-(n // 2 + 1) // engine.lines)
    assert len(_Emulated.restored) == iterations * (tiles if not sparse else len(set(_Emulated.restored)))
    assert (len(set(_Emulated.restored)) < tiles / 2) == sparse  # sparse data: most tiles skipped


def test_measured_tiles_are_the_tiles_with_a_measured_bin():
    """A tile (lines x = g F .. g F + F - 1 at row y, along z) is measured when a count on one of its lines is not
    0; the padding beyond n / 2 + 1 values a row is never looked at."""
    n = 32
    gp_fused.LAYOUT[n] = (4, 16)
    try:
        engine = emulated_engine(n)
    finally:
        del gp_fused.LAYOUT[n]
    counts = np.zeros((n, n, engine.stride), np.uint8)
    counts[5, 3, 16] = 1  # row 3, group 1
    counts[31, 7, 0] = 2  # row 7, group 0
    counts[0, 9, 16:] = 1  # row 9: only group 1 (x 16) lies below n / 2 + 1 = 17; the rest is padding
    groups = -(-(n // 2 + 1) // engine.lines)
    assert engine.measured_tiles(counts.reshape(-1)).tolist() == [3 * groups + 1, 7 * groups, 9 * groups + 1]
    assert engine.measured_tiles(np.zeros(counts.size, np.uint8)).size == 0


def test_the_byte_model_counts_the_restore_on_its_measured_tiles():
    n = 256
    values = n * n * (n // 2 + 1)
    assert gp_fused.loop_bytes(n, 50) == values * (50 * 73 + 48)
    assert gp_fused.loop_bytes(n, 50, measured=0.44) == int(values * (50 * (73 - 0.56 * 25) + 48))
