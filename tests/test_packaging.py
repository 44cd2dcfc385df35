"""The wheel carries the CUDA sources as package data."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_the_cu_files(tmp_path):
    # build from a copy, so that the build leaves nothing in the checkout
    src = tmp_path / "src-copy"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(src)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    wheels = list(tmp_path.glob("qora-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    sources = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "qora").rglob("*.cu"))
    assert sources, "the package has no .cu files"
    missing = [s for s in sources if s not in names]
    assert not missing, f"wheel lacks {missing}"
