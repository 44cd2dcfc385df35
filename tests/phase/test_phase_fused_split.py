"""The four-step split of fused_fft's 2D column pass (candidate ``column_split``, kernels/fused_fft.cu
MODE_SPLIT) as NumPy passes with the kernels' index maps and twiddle signs, against the one-pass column
transform with its modulus step (float64). The kernels themselves are compared with the CPU engine by
tests/phase/test_phase_cuda.py::test_fused_fft_candidates_match_cpu on the GPU."""

import numpy as np
import pytest

from qora.phase.cuda_fused import SPLIT_HEIGHTS, SPLIT_N1


def _modulus(v, a, scale):
    """phase_ops.cuh's modulus_one on arrays: scale * P_M(scale * v), a < 0 left free."""
    mag = np.abs(v)
    safe = np.where(mag > 0, mag, 1.0)
    proj = np.where(mag > 0, v * scale * a / safe, scale * a)
    return np.where(a >= 0, proj, v * scale * scale)


def _split_passes(y, amp, scale, n1):
    """The three passes on (B, H, W): rows y = n2_count n1 + n2, spectral rows k = k1 + n1 k2."""
    b, h, w = y.shape
    n2 = h // n1
    v = np.fft.fft(y.reshape(b, n1, n2, w), axis=1)  # pass 1: lines of n1 points, stride n2 rows
    j, k1 = np.arange(n2), np.arange(n1)
    x = 2.0 * k1 / h  # the kernel's exact argument: twiddle exp(-+ i pi j x)
    twiddle = np.exp(-1j * np.pi * j[None, :] * x[:, None])[None, :, :, None]  # [k1, j]
    v = np.fft.fft(v * twiddle, axis=2)  # pass 2: row n2 k1 + k2 holds spectral row k1 + n1 k2
    a = amp.reshape(n2, n1, w).transpose(1, 0, 2)[None]  # amp[k1 + n1 k2] at [k1, k2]
    v = _modulus(v, a, scale)
    v = np.fft.ifft(v, axis=2) * n2 * np.conj(twiddle)
    v = np.fft.ifft(v, axis=1) * n1  # pass 3: lines of n1 points, back in natural order
    return v.reshape(b, h, w)


@pytest.mark.parametrize("h", SPLIT_HEIGHTS)
def test_split_column_pass_equals_the_one_pass_transform(h):
    rng = np.random.default_rng(1)
    w = 4
    y = rng.standard_normal((2, h, w)) + 1j * rng.standard_normal((2, h, w))
    amp = np.abs(rng.standard_normal((h, w)))
    amp[0, 0] = -1.0  # a masked pixel
    scale = 1.0 / np.sqrt(h * w)
    one_pass = np.fft.ifft(_modulus(np.fft.fft(y, axis=1), amp[None], scale), axis=1) * h
    np.testing.assert_allclose(_split_passes(y, amp, scale, SPLIT_N1), one_pass, rtol=0,
                               atol=1e-12 * np.abs(one_pass).max())


def test_a_wrong_twiddle_sign_is_caught():
    """The comparison above can fail: the conjugate twiddle on the way in breaks it."""
    rng = np.random.default_rng(2)
    h, w = SPLIT_HEIGHTS[0], 2
    y = rng.standard_normal((1, h, w)) + 1j * rng.standard_normal((1, h, w))
    n2 = h // SPLIT_N1
    v = np.fft.fft(y.reshape(1, SPLIT_N1, n2, w), axis=1)
    j, k1 = np.arange(n2), np.arange(SPLIT_N1)
    wrong = np.exp(+2j * np.pi * np.outer(k1, j) / h)[None, :, :, None]
    spectrum = np.fft.fft(v * wrong, axis=2).transpose(0, 2, 1, 3).reshape(1, h, w)
    assert not np.allclose(spectrum, np.fft.fft(y, axis=1))


def test_measured_layout_is_the_h200_table():
    """The fused engine's default loads per shape: the fastest measured (docs/phase-performance.md)."""
    from qora.phase.cuda_fused import measured_layout

    assert measured_layout((256, 256, 256)) == {"contig_load": "prefetch", "strided_load": "async", "column_split": False}
    assert measured_layout((512, 512, 512))["strided_load"] == "plain"
    assert measured_layout((4096, 4096))["column_split"] is True
    assert measured_layout((2048, 2048)) == {"contig_load": "prefetch", "strided_load": "async", "column_split": False}
