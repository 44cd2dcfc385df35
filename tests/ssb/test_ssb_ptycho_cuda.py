"""qora.ssb.ptycho on CUDA (the same array code on CuPy): the model, its gradients and the solver's passes against
the CPU's, and the one-call chain from a CUDA session."""

import numpy as np
import pytest

from qora.ssb.optics import Aberrations, wavelength
from qora.ssb.ptycho import Grid, PtychoOptions, forward, initial_state, iterate, loss_and_gradients, measured_problem
from qora.ssb.ptycho.run import reconstruct
from qora.ssb.simulation import amorphous_slices, simulate

pytestmark = pytest.mark.gpu

KV, ALPHA, PIXEL, WINDOW = 300.0, 25.0, 0.15, 32


@pytest.fixture(scope="module")
def cp(gpu_module):
    import cupy

    return cupy


@pytest.fixture(scope="module")
def film(cp):
    slices = amorphous_slices((64, 64), PIXEL, slices=3, atoms_per_a2=0.1, seed=3)
    sim = simulate(slices, pixel=PIXEL, stride=4, window=WINDOW, kv=KV, alpha_mrad=ALPHA,
                   aberrations=Aberrations(C10=80.0), thickness=30.0, dose=1e6)
    return sim, cp


def test_the_model_and_its_gradients_on_the_device_equal_the_cpu(cp):
    rng = np.random.default_rng(0)
    grid = Grid(window=16, pixel=0.2, wavelength=0.0197, slice_spacing=5.0, band=2.0)
    objects = np.exp(1j * 0.3 * rng.standard_normal((3, 40, 44)))
    probe = rng.standard_normal((2, 16, 16)) + 1j * rng.standard_normal((2, 16, 16))
    positions = rng.random((6, 2)) * 20
    amplitudes = np.sqrt(forward(objects, probe * 1.1, positions + 0.2, grid).intensity)
    host_d, device_d = {}, {}
    host = loss_and_gradients(objects, probe, positions, amplitudes, grid, want_positions=True,
                              illumination=np.zeros(objects.shape), derivatives=host_d)
    lit = cp.zeros(objects.shape)
    device = loss_and_gradients(cp.asarray(objects), cp.asarray(probe), cp.asarray(positions), cp.asarray(amplitudes),
                                grid, want_positions=True, illumination=lit, derivatives=device_d)
    assert device[0] == pytest.approx(host[0], rel=1e-10)
    assert device_d["slice_spacing"] == pytest.approx(host_d["slice_spacing"], rel=1e-9)  # the thickness's step
    for h, d in zip(host[1:], device[1:]):
        np.testing.assert_allclose(cp.asnumpy(d), h, rtol=0, atol=1e-10 * np.abs(h).max())


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_the_slice_kernels_equal_the_array_code(cp, dtype):
    """ptycho.cu's transmission and its adjoint (the sums into the slice's gradient and its illumination by
    atomics, windows overlapping by all but a pixel) against the array code on the host; a float64 illumination
    beside complex64 waves takes the kernel's float32 sum and is added in."""
    from qora.ssb.ptycho.model import _slice_adjoint, _transmit

    rng = np.random.default_rng(1)
    n, modes = 12, 3
    slice_ = (rng.standard_normal((30, 34)) + 1j * rng.standard_normal((30, 34))).astype(dtype)
    corners = np.array([[0, 0], [1, 0], [0, 1], [5, 7], [18, 22], [1, 1]], np.int64)
    wave = (rng.standard_normal((6, modes, n, n)) + 1j * rng.standard_normal((6, modes, n, n))).astype(dtype)
    g = (rng.standard_normal(wave.shape) + 1j * rng.standard_normal(wave.shape)).astype(dtype)
    out, patch = _transmit(slice_, wave, corners, n)
    d_out, d_patch = _transmit(cp.asarray(slice_), cp.asarray(wave), cp.asarray(corners), n)
    assert patch is not None and d_patch is None  # the kernel's path keeps no windows
    bound = 1e-6 if dtype == np.complex64 else 1e-13
    np.testing.assert_allclose(cp.asnumpy(d_out), out, rtol=0, atol=bound * np.abs(out).max())
    for lit_dtype in (slice_.real.dtype, np.float64):
        g_slice, lit = np.zeros_like(slice_), np.zeros(slice_.shape, lit_dtype)
        d_slice, d_lit = cp.zeros_like(cp.asarray(slice_)), cp.zeros(slice_.shape, lit_dtype)
        g_next = _slice_adjoint(g, wave, slice_, patch, corners, g_slice, lit)
        d_next = _slice_adjoint(cp.asarray(g), cp.asarray(wave), cp.asarray(slice_), None, cp.asarray(corners),
                                d_slice, d_lit)
        for host, device in ((g_next, d_next), (g_slice, d_slice), (lit, d_lit)):
            np.testing.assert_allclose(cp.asnumpy(device), host, rtol=0, atol=bound * 10 * np.abs(host).max())
        assert np.abs(lit).max() > 0 and np.count_nonzero(g_slice) > 400  # the windows' pixels were reached


@pytest.mark.parametrize("dtype, amplitude", [(np.complex64, np.float32), (np.complex64, np.float64),
                                              (np.complex128, np.float64)])
@pytest.mark.parametrize("noise", ["amplitude", "poisson"])
def test_the_misfit_and_probe_kernels_equal_the_array_code(cp, dtype, amplitude, noise):
    """ptycho.cu's misfit weight (the modes' power summed, floored, the misfit summed by atomics, the far fields
    weighted) against the array code on the host, a few far-field pixels dark where the floor holds the intensity;
    and its sums over the batch (the probe's gradient, the positions' derivatives) against float64 sums."""
    from qora.ssb.ptycho.model import Batch, _far_kernel_takes, _far_weight, _probe_kernel_takes, _probe_sums

    rng = np.random.default_rng(2)
    b, modes, n = 5, 3, 12
    far = (rng.standard_normal((b, modes, n, n)) + 1j * rng.standard_normal((b, modes, n, n))).astype(dtype)
    far[0, :, 0, :3] = 0
    amplitudes = (2.0 * rng.random((b, n, n))).astype(amplitude)
    host_loss, host_weighted = _far_weight(Batch(None, None, None, [], [], far, None), amplitudes, 1e-12, noise)
    assert _far_kernel_takes(cp.asarray(far), cp.asarray(amplitudes))
    device_loss, device_weighted = _far_weight(Batch(None, None, None, [], [], cp.asarray(far), None),
                                               cp.asarray(amplitudes), 1e-12, noise)
    single = dtype == np.complex64
    assert float(device_loss) == pytest.approx(float(host_loss), rel=1e-5 if single else 1e-12)
    assert device_weighted.dtype == dtype  # float64 amplitudes leave complex64 far fields complex64
    np.testing.assert_allclose(cp.asnumpy(device_weighted), host_weighted, rtol=0,
                               atol=(1e-5 if single else 1e-12) * np.abs(host_weighted).max())
    # the probe's and the positions' sums over the batch (the model's backward pass) against float64 sums here
    ramps = np.exp(2j * np.pi * rng.random((b, n, n))).astype(dtype)
    probe_k = (rng.standard_normal((modes, n, n)) + 1j * rng.standard_normal((modes, n, n))).astype(dtype)
    g_k = (rng.standard_normal(far.shape) + 1j * rng.standard_normal(far.shape)).astype(dtype)
    f = np.fft.fftfreq(n)
    inner = np.conj(g_k) * (ramps[:, None] * probe_k[None]).astype(np.complex128)
    d_positions = 2 * np.stack([(inner * -2j * np.pi * f[:, None]).real.sum((1, 2, 3)),
                                (inner * -2j * np.pi * f[None, :]).real.sum((1, 2, 3))], 1)
    probe_sum = (np.conj(ramps)[:, None] * g_k.astype(np.complex128)).sum(0)
    assert _probe_kernel_takes(cp.asarray(g_k), cp.asarray(ramps), True)
    batch = Batch(None, cp.asarray(ramps), cp.asarray(probe_k), [], [], None, None)
    for want_positions in (False, True):
        device_sum, device_positions = _probe_sums(cp.asarray(g_k), batch, want_positions)
        np.testing.assert_allclose(cp.asnumpy(device_sum), probe_sum, rtol=0,
                                   atol=(1e-6 if single else 1e-13) * np.abs(probe_sum).max())
        if want_positions:
            assert device_positions.dtype == g_k.real.dtype
            np.testing.assert_allclose(cp.asnumpy(device_positions), d_positions, rtol=0,
                                       atol=(1e-5 if single else 1e-12) * np.abs(d_positions).max())
        else:
            assert device_positions is None


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_the_object_step_kernel_equals_the_array_code(cp, dtype):
    """ptycho.cu's step of the slices (the illumination-regularised step, |O| clamped to 1) against the solver's
    array code on the host, with pixels never lit (the regularised peak divides there) and pixels pushed past 1."""
    from qora.ssb.ptycho.solver import _object_step

    rng = np.random.default_rng(3)
    shape = (3, 20, 24)
    objects = (0.9 * np.exp(1j * rng.standard_normal(shape))).astype(dtype)
    g = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    lit = (rng.random(shape) * 5).astype(objects.real.dtype)
    lit[:, :4] = 0
    device = cp.asarray(objects)
    _object_step(objects, g, lit, 0.3, 0.05)
    _object_step(device, cp.asarray(g), cp.asarray(lit), 0.3, 0.05)
    assert np.abs(objects).max() <= 1 + 1e-6 and np.sum(np.abs(objects) > 1 - 1e-6) > 10  # the clamp acted
    np.testing.assert_allclose(cp.asnumpy(device), objects, rtol=0, atol=1e-6 if dtype == np.complex64 else 1e-14)


@pytest.mark.parametrize("spacing", [False, True])
def test_the_solvers_passes_on_the_device_equal_the_cpu(film, spacing):
    """Three passes on both backends from the same start (the measured aperture, focal-spread modes, a phase of
    0.01 rad rms as the chain's direct image gives one): equal within complex64 rounding. From a flat object the
    model's dark field is rounding alone and the amplitude misfit's gradient there takes its phase from it: a
    relative change of 1e-7 in the counts then moves the objects by 2e-4 after three passes on the CPU alone
    (1.5e-7 from this start; docs/ssb-methods.md). The probe is compared by its intensity, the sum over modes of
    |mode|^2, which a unitary mixing of near-degenerate modes leaves alone. With the spacing refined the start is
    20 A for the film's 30 (a derivative near zero at the truth would leave Adam's first step, +-rate whatever its
    size, to the rounding's sign). Without the spacing the device's batches after a pass's first are replays of
    one CUDA graph of the step (a pass refining the spacing runs them as they are), so the graph is held to the
    CPU too."""
    sim, cp = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    thickness = 20.0 if spacing else 30.0
    options = PtychoOptions(iterations=3, positions_from=2, batch=16, spacing_rate=0.002 if spacing else 0.0,
                            spacing_from=1)
    states = []
    for xp in (np, cp):
        problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                                   mrad_per_pixel=mrad, slices=3, thickness=thickness, xp=xp)
        first = 0.01 * np.random.default_rng(5).standard_normal(problem.object_shape)
        state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, thickness=thickness,
                              slices=3, modes=2, first_phase=first)
        iterate(problem, state, options, free_bytes=1 << 30)
        states.append(state)
    host, device = states
    # without the spacing, the device's passes after their first batch replayed a CUDA graph of the step
    assert spacing or "graph" not in device.adam, device.adam.get("graph")
    intensity = {"objects": lambda s: s.objects, "probe": lambda s: (abs(s.probe) ** 2).sum(0),
                 "positions": lambda s: s.positions}
    for name, of in intensity.items():
        a, b = of(host), cp.asnumpy(of(device))
        ratio = float(np.linalg.norm(b - a) / np.linalg.norm(a))
        assert ratio <= 3e-5, (name, ratio)  # complex64 on both: rounding apart (the CPU alone: 2e-7)
    np.testing.assert_allclose(device.losses, host.losses, rtol=3e-5)
    if spacing:
        assert host.adam["slice_spacing"] != pytest.approx(20.0 / 3, rel=1e-4)  # it moved
        assert device.adam["slice_spacing"] == pytest.approx(host.adam["slice_spacing"], rel=1e-5)


def test_the_chain_from_a_cuda_session(film):
    from qora.ssb import Session

    sim, cp = film
    session = Session(sim.data, kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step, backend="cuda")
    fit = {"rotation_rad": 0.0, "orientation": {"orientation": "identity"}, "better": "standard",
           "standard": {"parameters": {"C10": 80.0}}, "incoherent": {"parameters": {"thickness": 30.0}}}
    result = reconstruct(sim.data, session, fit, options=PtychoOptions(iterations=3), modes=2)
    assert isinstance(result.objects, np.ndarray) and result.objects.shape[0] == 3 and len(result.losses) == 3
    assert result.losses[-1] < result.losses[0]
