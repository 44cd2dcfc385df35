"""What tells a user whether to trust a reconstruction: the starts' agreement, convergence, the scale-free
comparison and the bound on a stage's iterations."""

import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli.root import cli
from qora.phase import analysis, objects, reconstruct
from qora.phase.recipe import MAX_STAGE_ITERATIONS, Recipe, RecipeError


def _starts(kinds):
    """Objects and supports of starts: "same" is the triangle moved, phased, scaled or twinned; "other" a box."""
    tri = objects.triangle(64).astype(np.complex64)
    box = objects.box((64, 64), 12).astype(np.complex64)
    made = {"same": [tri, 2.5 * np.roll(tri, (3, -2), (0, 1)) * np.exp(0.7j), analysis.twin(tri)],
            "other": [box, np.roll(box, 5, 0) * 1j]}
    out, used = [], {"same": 0, "other": 0}
    for k in kinds:
        out.append(made[k][used[k] % len(made[k])])
        used[k] += 1
    objs = np.stack(out)
    return objs, np.abs(objs) > 0


def test_agreeing_starts_are_reported_reproducible_with_full_support_overlap():
    objs, sups = _starts(["same", "same", "same"])
    rep = analysis.agreement(objs, sups, np.array([0.2, 0.1, 0.3]))
    assert rep["best"] == 1 and rep["starts"] == [1, 0, 2]
    assert rep["agree"] == 3 and rep["reproducible"] is True
    assert max(rep["object_error"]) < 1e-3
    assert min(rep["support_overlap"]) > 0.99  # the supports moved by the object's own shift and twin
    assert rep["message"].startswith("reproducible: 3 of 3")


def test_a_run_whose_starts_disagree_is_flagged():
    """The best start is the triangle; three of five starts found another object: 2 of 5 agree."""
    objs, sups = _starts(["same", "other", "same", "other", "other"])
    rep = analysis.agreement(objs, sups, np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert rep["agree"] == 2 and rep["reproducible"] is False
    assert rep["message"].startswith("not reproducible: 2 of 5 starts agree with the best")
    direct = analysis.object_error(objs[1] / np.linalg.norm(objs[1]), objs[0] / np.linalg.norm(objs[0]))
    assert rep["object_error"][1] == pytest.approx(direct, rel=1e-6) and direct > analysis.AGREE_OBJECT_ERROR
    assert rep["support_overlap"][1] < 0.9  # another object: its support is not the best one's


def test_reconstruct_reports_agreement_and_keeps_it_in_the_file(tmp_path):
    """Too few iterations from random starts (HIO**5 on a loose support): the starts land on different objects,
    and the result says so; with a recipe that converges they agree, with a PRTF."""
    from qora.phase import read_result, write_result

    obj, intensity = objects.simulate("triangle", 64)
    loose = np.zeros((64, 64), bool)
    loose[8:56, 8:56] = True
    bad = reconstruct(intensity, support=loose, recipe="HIO**5", starts=4, backend="cpu")
    assert bad.agreement["reproducible"] is False and bad.agreement["agree"] < 2
    good = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**200 ER**100", starts=3,
                       backend="cpu")
    assert good.agreement["reproducible"] is True and good.agreement["agree"] == 3
    assert good.agreement["resolution_px"] == pytest.approx(2.0, abs=0.1)  # the PRTF stays up to Nyquist
    write_result(tmp_path / "r.cxi", bad)
    assert read_result(tmp_path / "r.cxi").agreement == bad.agreement


def test_convergence_flags_a_falling_error_and_passes_a_flat_one():
    flat = 0.01 * (1 + 1e-7 * np.arange(100)[::-1])
    falling = 0.01 * (1 + 1e-3 * np.arange(100)[::-1])
    assert analysis.convergence(flat)["converged"]
    report = analysis.convergence(np.r_[falling, np.nan])  # a switched-off tail is ignored
    assert not report["converged"] and report["window"] == 50
    assert report["fall"] == pytest.approx((falling[-51] - falling[-1]) / falling[-1])
    assert report["message"].startswith("not converged")


def test_unconverged_run_says_so_on_the_cli(tmp_path):
    from qora.phase.files import write_pattern

    obj, intensity = objects.simulate("triangle", 48)
    write_pattern(tmp_path / "p.cxi", intensity, truth=obj)
    np.save(tmp_path / "s.npy", objects.support_of(obj))
    out = CliRunner().invoke(cli, ["phase", "run", str(tmp_path / "p.cxi"), "--support", str(tmp_path / "s.npy"),
                                   "--recipe", "HIO**10", "--starts", "2", "--backend", "cpu", "--quiet",
                                   "--out", str(tmp_path / "r.cxi")])
    assert out.exit_code == 0, out.output
    assert "warning: best start not converged" in out.output


def test_compare_removes_the_scale_and_says_so(tmp_path):
    """A perfect reconstruction of a pattern scaled to 1e8 photons is in other units than the truth: the
    comparison removes the factor (printed) and finds the error of the shape alone."""
    from qora.phase.files import write_pattern, write_result

    obj, intensity = objects.simulate("triangle", 48)
    write_pattern(tmp_path / "p.cxi", intensity, truth=obj)
    result = reconstruct(intensity, support=objects.support_of(obj), recipe="ER**2", backend="cpu")
    result.object = (1234.5 * np.exp(0.3j) * analysis.twin(obj)).astype(np.complex64)
    write_result(tmp_path / "r.cxi", result)
    out = CliRunner().invoke(cli, ["phase", "compare", str(tmp_path / "r.cxi"), str(tmp_path / "p.cxi")])
    assert out.exit_code == 0, out.output
    assert float(out.output.split("relative object error ")[1].split()[0]) < 1e-5
    assert "global scale (x 0.00081" in out.output  # 1 / 1234.5
    err, info = analysis.scaled_error(3.0 * obj, obj)
    assert err < 1e-6 and info["scale"] == pytest.approx(1 / 3)


def test_stage_iterations_are_bounded():
    Recipe.parse(f"ER**{MAX_STAGE_ITERATIONS}")
    with pytest.raises(RecipeError, match="more than the 1,000,000"):
        Recipe.parse("HIO**10000000000")


def test_boolean_and_out_of_range_patterns_are_refused():
    from qora.io.errors import InputError

    obj, intensity = objects.simulate("triangle", 32)
    with pytest.raises(InputError, match="boolean"):
        reconstruct(intensity > intensity.mean(), recipe="ER**5", backend="cpu")
    with pytest.raises(InputError, match="multiply the pattern by a constant"):
        reconstruct(intensity * 1e-300, recipe="ER**5", backend="cpu")
    scaled = reconstruct(intensity * 1e-20, support=objects.support_of(obj), recipe="ER**50", backend="cpu")
    assert np.isfinite(scaled.fourier_error)  # a small scale inside the range is fine


def test_large_objects_are_compared_at_a_coarser_sampling(monkeypatch):
    """Above AGREE_MOST_VOXELS the starts are compared with their spectra cropped about q = 0: the same verdicts
    as in full (the triangle moved and twinned agrees, the box does not), and the factor is reported; the PRTF
    then reaches only the coarse Nyquist period (2 x the factor)."""
    objs, sups = _starts(["same", "same", "other"])
    intensity = np.abs(np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(objs[0]), norm="ortho"))) ** 2
    full = analysis.agreement(objs, sups, np.array([0.1, 0.2, 0.3]), intensity=intensity)
    monkeypatch.setattr(analysis, "AGREE_MOST_VOXELS", 32 * 32)
    coarse = analysis.agreement(objs, sups, np.array([0.1, 0.2, 0.3]), intensity=intensity)
    assert full["coarsened"] == 1 and coarse["coarsened"] == 2
    assert coarse["agree"] == full["agree"] == 2 and coarse["object_error"][1] < 0.05 < 0.5 < coarse["object_error"][2]
    assert coarse["resolution_px"] >= 4.0 - 1e-9
