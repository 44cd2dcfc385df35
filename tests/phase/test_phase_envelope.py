"""The real-object envelope search (qora.phase.envelope): Friedel completion, and the search on a
lithograph behind the ESRF logo pattern's beamstop and gap boxes."""

import numpy as np
import pytest

from qora.phase import analysis, reconstruct
from qora.phase.detector import BEAMLINE_BOXES, Detector, lithograph, record
from qora.phase.envelope import ITERATIONS, friedel_complete
from qora.phase.physics import detector_intensity


@pytest.mark.parametrize("n", [16, 15])
def test_friedel_completion_takes_the_mirror_of_a_real_objects_pattern(n):
    rng = np.random.default_rng(n)
    amp = np.sqrt(detector_intensity(rng.random((n, n)).astype(np.complex64)))  # a real object: I(q) = I(-q)
    measured = rng.random((n, n)) > 0.3
    completed, now = friedel_complete(np.where(measured, amp, 0.0), measured)
    mirror_measured = np.flip(measured) if n % 2 else np.roll(np.flip(measured), 1, axis=(0, 1))
    assert np.array_equal(now, measured | mirror_measured) and now.sum() > measured.sum()
    np.testing.assert_allclose(completed[now], amp[now], rtol=1e-5, atol=1e-6 * amp.max())


def test_the_envelope_search_finds_a_lithograph_behind_a_beamstop_box():
    truth = lithograph(256)
    counts, mask = record(truth, Detector(photons=2.5e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    seen = []
    result = reconstruct(counts, mask=mask, recipe="real-envelope", starts=1, backend="cpu",
                         progress=lambda stage, done, total, m: seen.append((done, total)))
    assert result.recipe == "real-envelope" and result.errors.shape == (ITERATIONS, 1)
    error, _ = analysis.scaled_error(result.object, truth.astype(np.complex64))  # the photon scale removed
    assert error < 0.05, error  # measured 0.0049 (seeds 0 and 1); the support is larger than the thin strokes
    assert seen and seen[-1][1] == ITERATIONS and result.agreement is not None


def test_holes_are_filled_as_scipy_fills_them():
    import scipy.ndimage as ndi

    from qora.phase.envelope import _filled

    rng = np.random.default_rng(0)
    for _ in range(10):
        s = ndi.binary_opening(rng.random((40, 30)) > 0.4)
        np.testing.assert_array_equal(_filled(s, np, ndi), ndi.binary_fill_holes(s))


def _batch(n, starts, seed=1):
    rng = np.random.default_rng(seed)
    z = (rng.random((starts, n, n)) * np.exp(2j * np.pi * rng.random((starts, n, n)))).astype(np.complex64)
    return z, rng.random((starts, n, n)).astype(np.float32), rng.random((starts, n, n)) > 0.5


def test_the_cpu_fast_path_equals_the_array_code():
    from qora.phase import envelope_cpu
    from qora.phase.envelope_iterate import ArrayIterations, FastCpuIterations, Pattern

    if not envelope_cpu.available():
        pytest.skip("ducc0 is not installed: the array code runs")
    truth = lithograph(128)
    counts, mask = record(truth, Detector(photons=1e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    pattern = Pattern(counts, mask, np)
    fast, ref = FastCpuIterations(pattern, 2), ArrayIterations(pattern, 2)
    z, r, support = _batch(128, 2)
    for (a, ea), (b, eb) in ((ref.project_complex(z), fast.project_complex(z)),
                             (ref.project_real(r, 0.99), fast.project_real(r, 0.99))):
        assert np.linalg.norm(b - a) < 1e-5 * np.linalg.norm(a)
        assert ea.shape == (2,) and ea[0] != ea[1]  # each start's own error
        np.testing.assert_allclose(eb, ea, rtol=1e-4)
    for x, p, positive in ((z, z[:, ::-1].copy(), False), (r, r[:, ::-1].copy() - 0.3, True)):
        for hio in (True, False):
            want = ref.update(x.copy(), p, support, hio=hio, positive=positive)
            np.testing.assert_allclose(fast.update(x.copy(), p, support, hio=hio, positive=positive), want,
                                       rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fast", [False, True])
def test_the_starts_of_a_batch_do_not_touch_each_other(fast):
    """A start iterated in a batch of two is the start iterated alone (its own error too). (Three iterations: HIO
    from a random start on a random support amplifies a batched transform's rounding about tenfold per iteration,
    so whole searches end on different iterates.)"""
    from qora.phase import envelope_cpu
    from qora.phase.envelope_iterate import ArrayIterations, FastCpuIterations, Pattern

    if fast and not envelope_cpu.available():
        pytest.skip("ducc0 is not installed")
    truth = lithograph(128)
    counts, mask = record(truth, Detector(photons=1e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    pattern, make = Pattern(counts, mask, np), FastCpuIterations if fast else ArrayIterations
    z, r, support = _batch(128, 2)
    pair, alone = make(pattern, 2), make(pattern, 1)
    for x, step in ((z, lambda it, x, s: it.complex(x, s, 3, hio=True)),
                    (r, lambda it, x, s: it.positive(x, s, 3, hio=True, damp=0.99))):
        both, one = step(pair, x.copy(), support), step(alone, x[1:].copy(), support[1:])
        assert np.linalg.norm(both[1] - one[0]) < 1e-4 * np.linalg.norm(one[0])
    np.testing.assert_allclose(pair.history()[:, 1], alone.history()[:, 0], rtol=1e-5)


def test_the_batched_support_steps_equal_scipy_per_start():
    import scipy.ndimage as ndi

    from qora.phase.envelope import _Supports

    rng = np.random.default_rng(2)
    supports = np.stack([ndi.binary_opening(rng.random((40, 30)) > 0.4) for _ in range(3)])
    steps = _Supports(np, ndi, 2)
    grown = steps.grown(supports, 2)
    x = rng.random((3, 40, 30)).astype(np.float32)
    wrapped = steps.shrinkwrap(x, supports, 1.0, 0.5)
    for k in range(3):
        filled = ndi.binary_fill_holes(supports[k])
        np.testing.assert_array_equal(grown[k], ndi.binary_dilation(filled, iterations=2))
        blurred = ndi.gaussian_filter(x[k], 1.0)
        np.testing.assert_array_equal(wrapped[k], blurred > 0.5 * np.sqrt(np.mean(blurred[supports[k]] ** 2)))


def test_starts_beyond_the_memory_run_in_groups_with_their_numbers_and_one_progress(monkeypatch):
    """Where all starts do not fit (envelope.group_size), they run in groups: start k is still PCG64(seed + k), and
    the progress counts the whole run without going back."""
    from qora.phase import envelope

    truth = lithograph(128)
    counts, mask = record(truth, Detector(photons=1e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    monkeypatch.setattr(envelope, "group_size", lambda backend, shape, starts, reserved=0.0: 1)
    seen = []
    grouped = envelope.reconstruct(counts, mask=mask, starts=2, seed=5, backend="cpu", keep_all=True,
                                   progress=lambda stage, done, total, m: seen.append((done, total)))
    alone = envelope.reconstruct(counts, mask=mask, starts=1, seed=6, backend="cpu", keep_all=True)
    np.testing.assert_array_equal(grouped.objects[1], alone.objects[0])
    np.testing.assert_array_equal(grouped.errors[:, 1], alone.errors[:, 0])
    assert grouped.errors.shape == (ITERATIONS, 2)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == 2 * ITERATIONS and {t for _, t in seen} == {2 * ITERATIONS}


def test_the_group_size_follows_the_free_memory(monkeypatch):
    from qora.backend import resolve
    from qora.backend import device
    from qora.phase import envelope
    from qora.phase.checks import ENVELOPE_BYTES_PER_PIXEL

    per_start = ENVELOPE_BYTES_PER_PIXEL * 512 * 512
    monkeypatch.setattr(device, "free_memory", lambda backend: 6.5 * per_start)
    assert envelope.group_size(resolve("cpu"), (512, 512), 10) == 3  # half the free memory: 3 starts
    # the starts' results kept on the host leave less for the groups there (4.5 of 6.5 starts' worth: one)
    assert envelope.group_size(resolve("cpu"), (512, 512), 10, reserved=4.5 * per_start) == 1
    monkeypatch.setattr(device, "free_memory", lambda backend: None)
    assert envelope.group_size(resolve("cpu"), (512, 512), 10) == 10
