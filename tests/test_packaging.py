"""The wheel: it carries the CUDA sources and static assets as package data, and it installs and runs
`qora demo` in a fresh virtual environment."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _wheel(tmp_path) -> Path:
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
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return _wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.slow
def test_wheel_contains_the_cu_files_and_the_viewer_assets(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "qora").rglob("*.cu"))
    assert sources, "the package has no .cu files"
    statics = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "qora").rglob("static/*"))
    assert statics, "the package has no static assets"
    missing = [s for s in sources + statics if s not in names]
    assert not missing, f"wheel lacks {missing}"


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_demo_in_a_fresh_environment(wheel, tmp_path):
    # a new virtual environment with nothing but the wheel and its declared dependencies (from the
    # package index pip is configured with): no source checkout on the path, no extras
    env = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], capture_output=True,
                         text=True, env=clean)
    assert pip.returncode == 0, pip.stderr[-2000:]
    where = subprocess.run([str(env / "bin" / "python"), "-c", "import qora, sys; print(qora.__file__)"],
                           capture_output=True, text=True, env=clean, cwd=tmp_path, check=True).stdout
    assert str(env) in where and str(ROOT) not in where
    info = subprocess.run([str(env / "bin" / "qora"), "info", "--json"], capture_output=True, text=True, env=clean,
                          cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    demo = subprocess.run([str(env / "bin" / "qora"), "demo", "--out", str(tmp_path / "demo")], capture_output=True,
                          text=True, env=clean, cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    made = {p.name for p in (tmp_path / "demo").iterdir()}
    assert {"phase-result.png", "holo-slices.png", "ssb-ssb.png", "ssb-parallax.png"} <= made
