#!/usr/bin/env bash
# quantem's own virtual environment (.quantem/: PyTorch and its direct ptychography), benchmark-only:
# `qora bench ssb-methods` runs quantem's SSB, OBF, WDD, iCoM and parallax beside qora's when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .quantem/bin/python ]; then
  "$PYTHON" -m venv .quantem
fi
.quantem/bin/python -m pip install -q --upgrade pip
.quantem/bin/python -m pip install -q "quantem==0.1.10"
.quantem/bin/python -c "import quantem, torch; print('quantem', quantem.__version__, 'torch', torch.__version__)"
