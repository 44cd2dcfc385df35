"""The tutorial notebooks run, on the CPU at their small sizes, and say what they claim."""

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"


def _run(name, tmp_path):
    nb = nbformat.read(TUTORIALS / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))
    return text, images


def _number(pattern, text):
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in the notebook's output:\n{text}"
    return float(found.group(1))


@pytest.mark.slow
def test_the_cdi_tutorial_recovers_the_triangle(tmp_path):
    text, images = _run("phase", tmp_path)
    assert _number(r"object error after alignment: ([\d.e+-]+)", text) < 0.05
    assert images == 1 and (tmp_path / "triangle-result.png").is_file()


@pytest.mark.slow
def test_the_holography_tutorial_fills_the_missing_cone(tmp_path):
    text, images = _run("holo", tmp_path)
    plain = _number(r"plain\s+RMSE ([\d.e+-]+)", text)
    gp = _number(r"gp\s+RMSE ([\d.e+-]+)", text)
    assert gp < 0.7 * plain and images == 1


@pytest.mark.slow
def test_the_4dstem_tutorial_fits_the_aberrations_back(tmp_path):
    text, images = _run("ssb", tmp_path)
    assert abs(_number(r"fitted C10 ([\d.-]+) A", text) - 150) < 3
    assert abs(_number(r"C12 ([\d.]+) A at", text) - 20) < 2
    assert images == 1


@pytest.mark.slow
def test_the_scale_out_tutorial_matches_one_process(tmp_path):
    text, _ = _run("scale-out", tmp_path)
    assert "3 done, 0 failed" in text and re.search(r"pattern0000 True", text)
    errors = [float(e) for e in re.findall(r"object error ([\d.e+-]+)", text)]
    assert len(errors) == 3 and max(errors) < 0.05
