import numpy as np
import pytest

from qora.testing import assert_parity, default_rtol, dot_test


def test_default_tolerances_follow_dtype():
    assert default_rtol(np.float32) == default_rtol(np.complex64) == 1e-5
    assert default_rtol(np.float64) < 1e-10
    assert default_rtol(np.int32) == 0.0


def test_parity_passes_within_rounding(rng):
    x = rng.standard_normal((32, 32))

    def ref(a):
        return np.fft.fft2(a)

    def cand(a):
        return np.fft.fft2(a.astype(np.float32)).astype(np.complex64)

    report = assert_parity(ref, cand, x, rtol=1e-5)
    assert report.norm_rel[0] < 1e-6


def test_parity_fails_beyond_tolerance_and_names_the_element(rng):
    x = rng.standard_normal(100)

    def cand(a):
        b = a.copy()
        b[17] += 1e-3 * np.abs(a).max()
        return b

    with pytest.raises(AssertionError, match=r"worst at \(17,\)"):
        assert_parity(lambda a: a.copy(), cand, x)


def test_parity_rejects_nan_and_shape_mismatch(rng):
    x = rng.standard_normal(10)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_parity(lambda a: a, lambda a: np.where(a > 0, np.nan, a), x)
    with pytest.raises(AssertionError, match="shape"):
        assert_parity(lambda a: a, lambda a: a[:-1], x)
    with pytest.raises(AssertionError, match="outputs"):
        assert_parity(lambda a: (a, a), lambda a: a, x)


def test_parity_gives_each_side_its_own_inputs(rng):
    x = rng.standard_normal(10)

    def destructive(a):
        a *= 2  # mutates its input
        return a

    assert_parity(lambda a: 2 * a, destructive, x)
    assert_parity(destructive, lambda a: 2 * a, x)


def test_dot_test_accepts_a_true_adjoint_and_rejects_a_false_one():
    shape = (12, 10)

    def fwd(x):
        return np.fft.fft2(x, norm="ortho") * np.arange(1, 11)

    def adj(y):
        return np.fft.ifft2(y * np.arange(1, 11), norm="ortho")

    assert dot_test(fwd, adj, shape, shape) < 1e-12
    with pytest.raises(AssertionError, match="dot test failed"):
        dot_test(fwd, lambda y: np.fft.ifft2(y, norm="ortho"), shape, shape)


def test_dot_test_for_a_rectangular_operator_in_float32():
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((7, 5)) + 1j * rng.standard_normal((7, 5))).astype(np.complex64)
    assert dot_test(lambda x: a @ x, lambda y: a.conj().T @ y, (5,), (7,), dtype=np.complex64) < 1e-5


@pytest.mark.gpu
def test_parity_of_a_cupy_candidate(rng):
    from qora.backend import resolve

    cp = resolve("cuda").xp
    x = rng.standard_normal((64, 64)).astype(np.float32)
    assert_parity(lambda a: np.sin(a) * 3, lambda a: cp.sin(cp.asarray(a)) * 3, x)
    with pytest.raises(AssertionError):
        assert_parity(lambda a: np.sin(a), lambda a: cp.cos(cp.asarray(a)), x)


def test_the_emulated_device_refuses_what_cupy_refuses():
    """DeviceArray: ufuncs, operators, methods and DeviceXp's functions work and stay on the device; a NumPy-only
    function on it, an implicit conversion or a NumPy array mixed in raise TypeError (CuPy's behaviour)."""
    import pytest

    from qora.testing import DeviceArray, DeviceXp

    xp = DeviceXp()
    a = xp.asarray(np.arange(6.0).reshape(2, 3))
    assert isinstance(a, DeviceArray)
    b = np.sin(a) * 2 + (a.T.T @ xp.ones((3, 2)))[:, :1] - xp.linalg.solve(xp.eye(2), a)[:, :1]
    assert isinstance(b, DeviceArray) and isinstance(a.sum(), DeviceArray)
    assert isinstance(xp.where(a > 1, a, 0), DeviceArray)
    np.testing.assert_allclose(b.get(), 2 * np.sin(np.arange(6.0).reshape(2, 3)) + np.array([[3.0], [12.0]])
                               - np.array([[0.0], [3.0]]))
    assert float(a.sum()) == 15.0
    a[0, 0] = 7.0
    assert a.get()[0, 0] == 7.0
    for refused in (lambda: np.asarray(a), lambda: np.where(a > 1, a, 0), lambda: np.linalg.solve(xp.eye(2), a),
                    lambda: a + np.ones((2, 3)), lambda: np.ones((2, 3)) * a, lambda: xp.matmul(a, np.ones((3, 1)))):
        with pytest.raises(TypeError):
            refused()
    # set: a host array of the same dtype and shape, copied in (CuPy's checks)
    a[1].set(np.array([1.0, 2.0, 3.0]))
    assert a.get()[1].tolist() == [1.0, 2.0, 3.0]
    for bad, error in ((np.zeros(3, np.float32), TypeError), (np.zeros(2), ValueError), ([0.0, 1.0, 2.0], TypeError),
                       (np.zeros(2), RuntimeError)):
        with pytest.raises(error):
            (a[:, 0] if error is RuntimeError else a[1]).set(bad)
