"""qora.backend.streaming: copies by non-temporal stores equal NumPy's, and decline what they cannot copy."""

import numpy as np
import pytest

from qora.backend.streaming import STREAMING_STORES, copy_streaming

pytestmark = pytest.mark.skipif(not STREAMING_STORES, reason="streaming stores are written for x86-64 hosts")


@pytest.mark.parametrize("shape", [(1,), (7, 5), (49, 64, 64), (3, 1001)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64, np.uint16])
def test_streaming_copy_equals_numpy(shape, dtype):
    rng = np.random.default_rng(0)
    src = (rng.standard_normal(shape) * 1000).astype(dtype)
    dst = np.full(shape, 7, dtype)
    if src.nbytes % 4:  # an odd count of 2-byte values: not whole words
        assert not copy_streaming(dst, src)
        assert (dst == 7).all()
        return
    assert copy_streaming(dst, src)
    np.testing.assert_array_equal(dst, src)


def test_streaming_copy_declines_what_it_cannot_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for dst, src in [(np.empty((4, 6), np.float64), a),  # a cast
                     (np.empty((6, 4), np.float32), a),  # another shape
                     (np.empty((4, 3), np.float32), a[:, ::2]),  # not C-ordered
                     (np.empty(0, np.float32), np.empty(0, np.float32)),  # nothing to copy
                     (np.empty(5, np.float32), np.frombuffer(b"\0" + a.tobytes()[:20], np.float32, 5, 1))]:  # unaligned
        before = dst.copy()
        assert not copy_streaming(dst, src)
        np.testing.assert_array_equal(dst, before)
