# Two commands do all set-up on a fresh machine:
#   make demo   - runs the main jobs on built-in example data and writes their images to demo-output/
#   make test   - runs the whole CPU test suite (installs Debian's chromium for the viewer's tests)
#   make docs   - runs the tutorial notebooks into build/docs and builds the documentation site into site/
#                 (offline; no tracked file changes)
# Each makes a virtual environment in .venv and installs Qora with every extra but CUDA.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := test,dask,formats,viewer,fftw,docs,notebook

# The viewer's end-to-end tests drive Debian's Chromium (Playwright's own browser download is not
# used); installed here when missing.
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: demo test docs install clean cubins

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/qora demo --out demo-output

$(CHROMIUM):
	$(SUDO) apt-get update -q
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium

test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest -q -n auto --dist worksteal

docs: $(STAMP)
	$(PY) docs/tutorials/build_notebooks.py --execute --site build/docs
	QORA_DOCS_DIR=build/docs NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The prebuilt CUDA modules (phase's fused_fft, holo's fused and resident BPM) from their sources: nvcc and the
# cuFFTDx headers of the nvidia-mathdx wheel. Not part of test: the cubins ship built, and a test fails when
# their sources change without a rebuild (the digest beside each). Check a rebuilt cubin on a GPU before
# committing it (tests/phase/test_phase_fused*.py, tests/holo/test_bpm_*_cuda.py).
MATHDX_VERSION := 25.6.0
cubins: $(STAMP)
	$(PY) -m pip install -q --no-deps --target build/mathdx nvidia-mathdx==$(MATHDX_VERSION)
	$(PY) -m qora.phase.build_fused --mathdx build/mathdx/nvidia/mathdx
	$(PY) -m qora.holo.build_fused --mathdx build/mathdx/nvidia/mathdx

clean:
	rm -rf $(VENV) demo-output build dist site src/*.egg-info
