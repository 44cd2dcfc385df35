# Two commands do all set-up on a fresh machine:
#   make demo   - runs the main jobs on built-in example data and writes their images to demo-output/
#   make test   - runs the whole CPU test suite
# Each makes a virtual environment in .venv and installs Qora with every extra but CUDA.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := test,dask,formats,viewer,fftw

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/qora demo --out demo-output

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) demo-output build dist src/*.egg-info
