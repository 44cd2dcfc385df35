"""The measured-pattern benchmark case (the ESRF logo) and the detector boxes and lithograph it is mirrored by."""

import numpy as np
import pytest

from qora.bench import phase_measured
from qora.io.errors import InputError
from qora.phase import analysis, objects
from qora.phase.detector import BEAMLINE_BOXES, Detector, lithograph, mask_for, record


def test_boxes_are_placed_relative_to_q0_and_scaled_with_the_array():
    one = Detector(beamstop=0, gap=0, boxes=((0, 0, 3, 4),))
    mask = mask_for((512, 512), one)
    assert mask.sum() == 12 and mask[256:259, 256:260].all()
    half = mask_for((256, 256), Detector(beamstop=0, gap=0, boxes=((-4, 2, 4, 6),)))
    assert half.sum() == 6 and half[126:128, 129:132].all()  # (-2, 1, 2, 3) at 256
    with pytest.raises(InputError, match="height and width"):
        Detector(boxes=((0, 0, 0, 3),))


def test_beamline_boxes_hide_the_centre_and_the_corners():
    mask = mask_for((512, 512), Detector(beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    assert mask[256, 256] and mask[0, 500] and mask[500, 10] and not mask[0, 0] and not mask[100, 100]
    assert mask[248:265, 244:269].all()  # the 17 x 25 px beamstop box
    assert 2500 < mask.sum() < 3500  # the logo pattern's mask holds 2,720 px


def test_lithograph_is_binary_flat_and_oversampled():
    for n in (256, 512):
        x = lithograph(n)
        assert set(np.unique(np.abs(x))) == {0.0, 1.0} and np.all(np.angle(x[np.abs(x) > 0]) == 0)
        rows, cols = np.nonzero(np.abs(x))
        assert np.ptp(rows) < n / 2 and np.ptp(cols) < n / 2  # oversampling above 2 on each axis
    assert np.abs(lithograph(512)).sum() == pytest.approx(4 * np.abs(lithograph(256)).sum(), rel=0.15)


def test_amplitude_rfactor_and_support_iou_against_hand_values():
    obj, intensity = objects.simulate("triangle", 48)
    assert analysis.amplitude_rfactor(obj, intensity) < 1e-6
    assert analysis.amplitude_rfactor(2 * obj, intensity) == pytest.approx(1.0, rel=1e-6)  # |2a - a| / a
    support = objects.support_of(obj)
    moved = np.roll(analysis.twin(support.astype(np.complex64)).real > 0.5, (3, -5), (0, 1))
    assert analysis.support_iou(moved, support) == pytest.approx(1.0)
    half = support.copy()
    half[: 24] = False
    expected = half.sum() / support.sum()  # a subset: intersection = the subset, union = the support
    assert analysis.support_iou(half, support) == pytest.approx(expected, rel=1e-9)


def test_logo_case_runs_on_files_in_the_data_folder(tmp_path, monkeypatch):
    """A small stand-in for the logo (the 64^2 triangle, its mask and support as the case's three files): the
    row has every start's R-factor and overlap, and a run with the true support's recipe succeeds."""
    fabio = pytest.importorskip("fabio")
    obj, intensity = objects.simulate("triangle", 64)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=0))
    fabio.edfimage.EdfImage(data=counts.astype(np.float32)).write(str(tmp_path / phase_measured.LOGO_FILES[0]))
    np.save(tmp_path / phase_measured.LOGO_FILES[1], mask)
    fabio.edfimage.EdfImage(data=objects.support_of(obj).astype(np.uint8)).write(str(tmp_path / phase_measured.LOGO_FILES[2]))
    monkeypatch.setenv("QORA_CDI_DATA", str(tmp_path))
    row = phase_measured.run_logo_case(starts=2, backend="cpu")
    assert len(row["r_factor"]) == len(row["support_iou"]) == 2
    assert row["succeeded"] == sum(r <= phase_measured.LOGO_R_BOUND and i >= phase_measured.LOGO_IOU_BOUND
                                   for r, i in zip(row["r_factor"], row["support_iou"]))
    assert row["succeeded"] == 2 and row["best_start_succeeded"]  # the triangle is found from its pattern alone
    (tmp_path / phase_measured.LOGO_FILES[2]).unlink()
    with pytest.raises(InputError, match="esrf_logo_id10_support.edf"):
        phase_measured.run_logo_case(starts=1, backend="cpu")


def test_the_real_logo_files_when_present(shared_data):
    folder = shared_data / "cdi"
    if not (folder / phase_measured.LOGO_FILES[0]).exists():
        pytest.skip(f"the ESRF logo files are not in {folder}")
    intensity, mask, support = phase_measured.load_logo(folder)
    assert intensity.shape == (512, 512) and mask.sum() == 2720 and support.sum() == 7577
    assert np.all(intensity[mask] == 0)


def test_a_measured_row_on_a_gpu_is_the_second_run_with_the_first_beside_it():
    """On a GPU the first run in a process also pays CUDA's start-up: the row is a second run's, the first's time
    and successes kept as cold_seconds and cold_succeeded; on the CPU one run."""
    from types import SimpleNamespace

    from qora.bench.phase_success import _measured_row

    calls = []

    def fake(*, starts, recipe, backend):
        calls.append(backend)
        return {"seconds": 2.0 if len(calls) == 1 else 1.0, "succeeded": 9 + len(calls), "starts": starts}

    row = _measured_row(fake, starts=10, recipe=None, backend=SimpleNamespace(is_cuda=True, name="cuda"))
    assert calls == ["cuda", "cuda"]
    assert (row["seconds"], row["succeeded"], row["cold_seconds"], row["cold_succeeded"]) == (1.0, 11, 2.0, 10)
    calls.clear()
    row = _measured_row(fake, starts=10, recipe=None, backend=SimpleNamespace(is_cuda=False, name="cpu"))
    assert calls == ["cpu"] and "cold_seconds" not in row and row["seconds"] == 2.0
