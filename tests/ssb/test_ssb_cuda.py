"""qora.ssb on CUDA: G(Q, k), every image method and the mean phase against the CPU session."""

import numpy as np
import pytest

from qora.ssb.optics import Aberrations
from qora.ssb.session import Session
from qora.ssb.simulate import amorphous_slices, simulate

pytestmark = pytest.mark.gpu

PIXEL, STRIDE, WINDOW, KV, ALPHA = 0.2, 2, 48, 300.0, 20.0
AB = Aberrations(C10=120.0, C12=(15.0, 0.4), C30=2e5)


@pytest.fixture(scope="module")
def sessions(gpu_module):
    sim = simulate(amorphous_slices((96, 96), PIXEL, seed=4), pixel=PIXEL, stride=STRIDE, window=WINDOW, kv=KV,
                   alpha_mrad=ALPHA, aberrations=AB)
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step, rotation=0.1, chunk=100)
    cpu = Session(sim.data, **kw)
    gpu = Session(sim.data, backend="cuda", detector=cpu.detector, **kw)
    streamed = Session(sim.data, backend="cuda", detector=cpu.detector, max_bytes=1, **kw)
    return cpu, gpu, streamed


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_g_is_computed_on_the_device_and_equals_the_cpu(sessions):
    cpu, gpu, streamed = sessions
    assert gpu.memory["G_on"] == "device" and streamed.memory["G_on"] == "host"
    assert type(gpu.G).__module__.startswith("cupy") and isinstance(streamed.G, np.ndarray)
    assert _rel(gpu.host_G(), cpu.G) < 1e-12
    assert gpu.memory["G_bytes"] == cpu.G.nbytes


@pytest.mark.parametrize("method,kw", [("ssb", {}), ("thick", dict(thickness=80.0, tilt=(0.004, -0.002))),
                                       ("parallax", {}), ("parallax", dict(upsample=3))],
                         ids=["ssb", "thick", "parallax", "parallax-up3"])
def test_images_match_the_cpu(sessions, method, kw):
    cpu, gpu, streamed = sessions
    ref = cpu.image(AB, method, **kw)
    for s in (gpu, streamed):  # G resident on the device, and G streamed from the host in chunks of k
        got = s.image(AB, method, **kw)
        assert isinstance(got, np.ndarray) and got.shape == ref.shape
        assert _rel(got, ref) < 1e-5


@pytest.mark.parametrize("thickness,tilt", [(0.0, (0.0, 0.0)), (120.0, (0.006, -0.003))])
def test_fused_ssb_kernel_with_every_aberration_matches_the_cpu(sessions, thickness, tilt):
    """The fused SSB kernel (G on the device) writes chi as a polynomial in (kx, ky): checked
    against the array code's polar chi with every supported coefficient, in float64."""
    cpu, gpu, _ = sessions
    ab = Aberrations(C10=80.0, C12=(25.0, 0.3), C21=(900.0, -1.1), C23=(700.0, 0.5), C30=3e5, C32=(2e4, 0.2),
                     C34=(1.5e4, -0.4))
    method = "thick" if thickness else "ssb"
    ref = cpu.image(ab, method, thickness=thickness, tilt=tilt) if thickness else cpu.image(ab, method)
    got = gpu.image(ab, method, thickness=thickness, tilt=tilt) if thickness else gpu.image(ab, method)
    assert _rel(got, ref) < 1e-9


def test_mean_phase_matches_the_cpu(sessions):
    cpu, gpu, streamed = sessions
    ref, loss = cpu.mean_phase(AB)
    for s in (gpu, streamed):
        phase, got_loss = s.mean_phase(AB)
        assert np.abs(np.angle(np.exp(1j * (phase - ref)))).max() < 5e-5
        assert got_loss == pytest.approx(loss, abs=1e-9)


def test_the_band_lives_where_g_does(sessions):
    from qora.ssb.agreement import Band

    cpu, gpu, streamed = sessions
    a, b, c = Band(cpu, ["C10"]), Band(gpu, ["C10"]), Band(streamed, ["C10"])
    assert b.xp.__name__ == "cupy" and c.xp is np  # a session streaming G fits on the host
    np.testing.assert_allclose(b.G.get(), a.G, rtol=1e-12, atol=1e-12 * np.abs(a.G).max())


@pytest.mark.parametrize("parameters", [("C10", "C12a", "C12b", "C30"),
                                        ("C10", "C12a", "thickness", "tilt_y", "tilt_x"),
                                        ("C10", "C12b", "rotation")])
def test_band_agreement_and_derivatives_match_the_cpu(sessions, parameters):
    """The agreement, its exact gradient and Hessian, and the batched agreement on the device
    equal the host's (the issue's 1e-5 relative on the agreement; the derivatives to the same)."""
    from qora.ssb.agreement import Band

    cpu, gpu, _ = sessions
    values = {"C10": 110.0, "C12a": 8.0, "C12b": -5.0, "C30": 1e5, "thickness": 80.0, "tilt_y": 0.004,
              "tilt_x": -0.002, "rotation": 0.12}
    values = {p: values[p] for p in parameters}
    a, b = Band(cpu, parameters), Band(gpu, parameters)
    va, ga, ha = a.evaluate(values)
    vb, gb, hb = b.evaluate(values)
    assert vb == pytest.approx(va, rel=1e-5)
    np.testing.assert_allclose(gb, ga, rtol=1e-5, atol=1e-9 * np.abs(ga).max())
    np.testing.assert_allclose(hb, ha, rtol=1e-5, atol=1e-9 * np.abs(ha).max())
    sets = [{**values, "C10": c} for c in (60.0, 110.0, 160.0)]
    np.testing.assert_allclose(b.evaluate_batch(sets), a.evaluate_batch(sets), rtol=1e-5)


@pytest.mark.parametrize("thick", [False, True])
def test_band_batch_kernel_matches_the_array_code(sessions, thick):
    """The fused batch kernel (chi per term from the set's coefficients) against the array code
    on the same device and the host's, with every aberration the band fits."""
    from qora.ssb.agreement import ABERRATION_PARAMETERS, Band, combine_batch_moments

    cpu, gpu, _ = sessions
    names = ABERRATION_PARAMETERS + (("thickness", "tilt_y", "tilt_x") if thick else ())
    rng = np.random.default_rng(3)
    sets = [{"C10": c, "C12a": rng.normal(0, 20), "C12b": rng.normal(0, 20), "C21a": rng.normal(0, 500),
             "C21b": rng.normal(0, 500), "C23a": rng.normal(0, 500), "C23b": rng.normal(0, 500), "C30": 2e5,
             "thickness": 60.0 + 10 * i, "tilt_y": 0.003, "tilt_x": -0.002}
            for i, c in enumerate(np.linspace(60.0, 180.0, 8))]
    a, b = Band(cpu, names), Band(gpu, names)
    fused = b.evaluate_batch(sets)
    arrays = combine_batch_moments(b._batch_arrays(sets), b.total)
    np.testing.assert_allclose(fused, arrays, rtol=1e-10)
    np.testing.assert_allclose(fused, a.evaluate_batch(sets), rtol=1e-9)


def test_rotation_fit_from_a_gpu_session_matches_the_cpu(sessions):
    """The cold-start rotation fit on the device gives the host's rotation within 0.01 degree."""
    from qora.ssb.agreement import fit_rotation

    cpu, gpu, _ = sessions
    ra, va, _ = fit_rotation(cpu)
    rb, vb, _ = fit_rotation(gpu)
    assert abs(np.rad2deg(rb - ra)) < 0.01
    assert abs(vb["C10"] - va["C10"]) < 0.1


def test_fits_from_a_gpu_session_match_the_cpu(sessions):
    """The fit of a GPU session runs on the device: it must give the CPU's fit (the issue's parity
    bounds: agreement 1e-5 relative, C10 and C12 within 0.1 A, tilt within 0.05 mrad)."""
    cpu, gpu, _ = sessions
    a = cpu.fit(rotation=0.1, tilt=True, trials=64)
    b = gpu.fit(rotation=0.1, tilt=True, trials=64)
    for branch in ("standard", "thick"):
        assert b[branch]["agreement"] == pytest.approx(a[branch]["agreement"], rel=1e-5)
        for name in ("C10", "C12a", "C12b"):
            assert abs(b[branch]["parameters"][name] - a[branch]["parameters"][name]) < 0.1
    for name in ("tilt_y", "tilt_x"):
        assert abs(b["thick"]["parameters"][name] - a["thick"]["parameters"][name]) < 5e-5
