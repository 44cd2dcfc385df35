"""The envelope search on the GPU: the same lines on CuPy arrays (qora.phase.envelope), checked against the CPU."""

import numpy as np
import pytest

from qora.phase import analysis, reconstruct
from qora.phase.detector import BEAMLINE_BOXES, Detector, lithograph, record

pytestmark = pytest.mark.gpu


def _case():
    truth = lithograph(256)
    counts, mask = record(truth, Detector(photons=2.5e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    return truth, counts, mask


def test_every_projection_matches_the_cpu():
    import cupy as cp
    import cupyx.scipy.ndimage as cndi
    import scipy.ndimage as ndi

    from qora.phase.envelope import _Problem

    _, counts, mask = _case()
    cpu, gpu = _Problem(counts, mask, np, ndi), _Problem(cp.asarray(counts), cp.asarray(mask), cp, cndi)
    rng = np.random.default_rng(0)
    z = (rng.random((256, 256)) * np.exp(2j * np.pi * rng.random((256, 256)))).astype(np.complex64)
    r = rng.random((256, 256)).astype(np.float32)
    for (a, ea), (b, eb) in (((cpu.project_complex(z)), gpu.project_complex(cp.asarray(z))),
                             ((cpu.project_real(r, 0.99)), gpu.project_real(cp.asarray(r), 0.99))):
        b = cp.asnumpy(b)
        assert np.linalg.norm(b - a) < 1e-5 * np.linalg.norm(a)
        assert float(eb) == pytest.approx(float(ea), rel=1e-5)
    np.testing.assert_array_equal(cp.asnumpy(gpu.meas), cpu.meas)


def test_the_search_finds_the_lithograph_on_the_gpu():
    truth, counts, mask = _case()
    result = reconstruct(counts, mask=mask, recipe="real-envelope", starts=2, backend="cuda", keep_all=True)
    assert result.backend == "cuda"
    for obj in result.objects:
        error, _ = analysis.scaled_error(obj, truth.astype(np.complex64))
        assert error < 0.05, error  # the CPU: 0.0049 from both seeds
