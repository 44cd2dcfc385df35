"""The standard fit's cost at full scale (issue 23): the searches and the multi-start's Newton on a
band thinned to every stride-th frequency (Band.thinned), the basins within reach finished on the
whole band (qora.ssb.identify.multi_start)."""

import math

import numpy as np
import pytest

from qora.ssb import Aberrations, Band, Session, amorphous_slices, simulate
from qora.ssb.identify import POLISH_GAPS, coarse_stride, gap_needed, multi_start
from qora.ssb.moments import combine_moments

NAMES = ("C10", "C12a", "C12b")


@pytest.fixture(scope="module")
def film():
    """An astigmatic film on a 32 x 32 scan (a few hundred band frequencies)."""
    sim = simulate(amorphous_slices((64, 64), 0.2, atoms_per_a2=0.1, seed=3), pixel=0.2, stride=2, window=32,
                   alpha_mrad=25.0, aberrations=Aberrations(C10=-120.0, C12=(15.0, 0.5)))
    return Session(sim.data, kv=300.0, alpha_mrad=25.0, scan_step=sim.scan_step)


def test_a_thinned_band_is_the_full_bands_moments_on_every_stride_th_frequency(film):
    """The thinned band by the host loops against the array code's per-Q moments of the whole band,
    summed over every 3rd frequency and normalised by their own signal."""
    full = Band(film, NAMES)
    thin = full.thinned(3)
    assert full.thinned(1) is full and thin.shape == (len(range(0, full.shape[0], 3)), full.shape[1])
    assert thin.keep.sum() == thin.shape[0] and not (thin.keep & ~full.keep).any()
    v = {"C10": -110.0, "C12a": 8.0, "C12b": 9.0}
    m = full._array_moments(v, 2)  # the reference route, every frequency
    sub = {k: a[..., ::3] for k, a in m.items()}
    total = float(np.sum(np.abs(full.G[::3]) ** 2))
    assert thin.total == pytest.approx(total, rel=1e-12)
    f0, g0, h0 = combine_moments(sub, total, 2)
    f1, g1, h1 = thin.evaluate(v)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(g1, g0, rtol=1e-8, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-8, atol=1e-10 * np.abs(h0).max())
    assert thin.evaluate_batch([v])[0] == pytest.approx(f0, rel=1e-10)
    assert thin.passes == {"batch": 1, "value": 0, "derivatives": 1} and full.passes["derivatives"] == 0
    with pytest.raises(ValueError):
        full.thinned(0)
    assert coarse_stride(full, rows=full.shape[0] // 3) == 3 and coarse_stride(full) == 1


class _DoubleWell:
    """A one-parameter agreement with two maxima (at x ~ 1 and x ~ -3): what multi_start needs of a band."""

    parameters = ("x",)
    shape = (1000, 1000)
    total = 1.0

    def __init__(self, second: float, shift: float = 0.0) -> None:
        self.second, self.shift = second, shift
        self.calls = 0

    def _f(self, x):
        x = x - self.shift
        a, b = math.exp(-0.5 * (x - 1) ** 2), math.exp(-0.5 * (x + 3) ** 2)
        f = 0.9 * a + self.second * b
        g = -0.9 * a * (x - 1) - self.second * b * (x + 3)
        h = 0.9 * a * ((x - 1) ** 2 - 1) + self.second * b * ((x + 3) ** 2 - 1)
        return f, g, h

    def evaluate(self, values, *, order=2):
        self.calls += 1
        f, g, h = self._f(values["x"])
        return f if order == 0 else (f, np.array([g])) if order == 1 else (f, np.array([g]), np.array([[h]]))

    def evaluate_batch(self, sets):
        return np.array([self._f(v["x"])[0] for v in sets])


@pytest.mark.parametrize("second, finished", [(0.5, False), (0.9 - 1e-3, True)])
def test_multi_start_finishes_the_basins_within_reach_on_the_full_band(second, finished):
    """The coarse band's maxima are 0.02 off the full band's: the best basin is finished on the full band
    (to its own maximum), a runner-up within POLISH_GAPS gaps needed too, one clearly worse keeps its coarse
    value with its full-band agreement and no Hessian."""
    full, coarse = _DoubleWell(second), _DoubleWell(second, shift=0.02)
    starts = [{"x": 0.3}, {"x": -2.5}, {"x": 1.5}]
    plain = multi_start(full, starts, ("x",), iterations=30)
    basins = multi_start(full, starts, ("x",), iterations=30, coarse=coarse)
    assert len(basins) == len(plain) == 2
    best, runner = basins
    # Newton stops where its step would gain < 1e-10 of the agreement: x to ~1e-5
    assert best[0]["x"] == pytest.approx(plain[0][0]["x"], abs=1e-4) and best[2] is not None
    assert best[1] == pytest.approx(plain[0][1], rel=1e-9)
    need = gap_needed(best[1], 10**6)
    assert (best[1] - runner[1] < POLISH_GAPS * need) == finished
    if finished:
        assert runner[2] is not None and runner[0]["x"] == pytest.approx(plain[1][0]["x"], abs=1e-4)
    else:
        assert runner[2] is None and runner[0]["x"] == pytest.approx(plain[1][0]["x"] + 0.02, abs=1e-3)
        assert runner[1] == pytest.approx(full.evaluate(runner[0], order=0), rel=1e-12)


def test_the_coarse_fit_ends_where_the_full_one_does(film):
    """fit_session with its search and starts on every 3rd frequency: the same basin, values and report,
    finished on the whole band in a few passes."""
    from qora.ssb import fit_session

    nq = Band(film, NAMES).shape[0]
    plain = fit_session(film, rotation=0.0, orientation="identity", tilt=False, trials=40)
    coarse = fit_session(film, rotation=0.0, orientation="identity", tilt=False, trials=40, coarse_rows=nq // 3)
    assert "standard_coarse" not in plain["passes"] and coarse["passes"]["standard_coarse"]["stride"] == 3
    for k, v in plain["standard"]["parameters"].items():
        assert coarse["standard"]["parameters"][k] == pytest.approx(v, abs=1e-3)
    assert coarse["standard"]["agreement"] == pytest.approx(plain["standard"]["agreement"], rel=1e-9)
    a, b = plain["standard"]["identifiability"]["parameters"], coarse["standard"]["identifiability"]["parameters"]
    assert {k: e["determined"] for k, e in a.items()} == {k: e["determined"] for k, e in b.items()}
    full, thin = coarse["passes"]["standard"], coarse["passes"]["standard_coarse"]
    assert full["derivatives"] <= 4 and full["batch"] == 1  # one batch of the basins, then the finish
    # in passes over the whole band's G: a pass of the thinned band reads a third of it
    cost = sum(full.values()) + sum(thin[k] for k in ("batch", "value", "derivatives")) / 3
    assert cost < 0.5 * sum(plain["passes"]["standard"].values()), (cost, plain["passes"])


# -- the array code in blocks of Q (the rotation's Newton on the device: its (Q, k) arrays are 3 GB each at
# full scale, 26 of them with the rotation's derivatives) ----------------------------------------------------------


@pytest.mark.parametrize("names", [("C10", "C12a", "C12b", "rotation"), ("C10", "C12a", "C30", "thickness", "tilt_y")])
def test_the_array_code_in_blocks_equals_it_in_one(film, names):
    """Band.moments by the array code with a budget of a few frequencies a block against one block: the
    agreement, gradient and Hessian, and a batch; each block within the memory model's bound."""
    import tracemalloc

    from qora.ssb.band_arrays import array_pair_bytes

    v = {"C10": -110.0, "C12a": 8.0, "C12b": 9.0, "C30": 2e4, "rotation": 0.01, "thickness": 40.0, "tilt_y": 2e-3}
    one, blocks = Band(film, names), Band(film, names)
    for b in (one, blocks):
        b.rotation_kernel = b.quadratic_kernels = False  # the array code on the host too
    one.block_bytes = 1 << 40
    nq, nbf = one.shape
    blocks.block_bytes = 7 * array_pair_bytes(len(names)) * nbf  # 7 frequencies a block
    f0, g0, h0 = one.evaluate(v)
    tracemalloc.start()
    try:
        f1, g1, h1 = blocks.evaluate(v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f1 == pytest.approx(f0, rel=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-12 * np.abs(h0).max())
    assert peak <= blocks.block_bytes + 64 * nq * 8 * len(names) ** 2  # the blocks and the joined moments
    sets = [v, {**v, "C10": -90.0}, {**v, "rotation": -0.02}]
    np.testing.assert_allclose(blocks.evaluate_batch(sets), one.evaluate_batch(sets), rtol=1e-12)


@pytest.mark.slow
def test_the_rotation_fit_with_thinned_c10_searches_ends_where_the_full_one_does(film):
    """fit_rotation's C10 grids on every 3rd frequency, its Newton on the whole band: the same rotation and C."""
    from qora.ssb import fit_rotation

    nq = Band(film, NAMES).shape[0]
    angles = np.deg2rad([-6.0, 0.0, 6.0])
    t0, v0, a0 = fit_rotation(film, angles=angles)
    t1, v1, a1 = fit_rotation(film, angles=angles, coarse_rows=nq // 3)
    assert abs(math.degrees(t1 - t0)) < 1e-3 and a1 == pytest.approx(a0, rel=1e-9)
    for k, v in v0.items():
        assert v1[k] == pytest.approx(v, abs=1e-2)
