"""The benchmark's error at the resolution the counts hold (qora.bench.phase_success.resolved_error, count_cutoff),
against objects built with a known band of error."""

import numpy as np
import pytest

from qora.bench.phase_success import aligned_error, count_cutoff, resolved_error
from qora.phase import objects


def _q(shape):
    grids = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    return np.sqrt(sum(g**2 for g in grids))


def _high_q_noise(truth, cutoff, scale, seed):
    """Complex noise whose transform lives at |q| >= cutoff only (cycles per pixel)."""
    rng = np.random.default_rng(seed)
    spec = (rng.standard_normal(truth.shape) + 1j * rng.standard_normal(truth.shape)) * (_q(truth.shape) >= cutoff)
    noise = np.fft.ifftn(spec, norm="ortho")
    return scale * noise / np.linalg.norm(noise) * np.linalg.norm(truth)


def test_resolved_error_ignores_error_beyond_the_cutoff_only():
    truth = objects.triangle(64).astype(np.complex128)
    x = truth + _high_q_noise(truth, 0.2, 0.3, seed=0)
    assert aligned_error(x, truth) > 0.25
    assert resolved_error(x, truth, 0.19) < 5e-3  # the sub-pixel alignment moves a little with the noise
    # the whole band kept: the plain aligned error
    assert resolved_error(x, truth, 1.0) == pytest.approx(aligned_error(x, truth), rel=1e-6)
    # error below the cutoff counts
    low = truth + 0.1 * np.linalg.norm(truth) * np.fft.ifftn(_q(truth.shape) < 0.05, norm="ortho") / np.sqrt(
        (_q(truth.shape) < 0.05).sum())
    assert resolved_error(low, truth, 0.19) > 0.05


def test_count_cutoff_is_the_first_shell_below_one_photon():
    """A pattern whose shells hold 5 counts per pixel up to radius 20 and 0.5 beyond (detector layout, a masked
    band of garbage that must not count): the cut-off is 20 / 64 cycles per pixel; all bright: 0.5."""
    n = 64
    g = np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2, indexing="ij")
    radius = np.hypot(*g)
    counts = np.where(radius < 20, 5.0, 0.5)
    mask = np.zeros((n, n), bool)
    mask[:, 40:43] = True
    counts[mask] = 1e6
    assert count_cutoff(counts, mask) == pytest.approx(20 / 64)
    assert count_cutoff(np.full((n, n), 3.0)) == 0.5
    assert count_cutoff(counts, mask, level=0.1) == 0.5
