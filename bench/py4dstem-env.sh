#!/usr/bin/env bash
# py4DSTEM's own virtual environment (.py4dstem/): it needs numpy < 2, which qora does not
# pin. Benchmark-only (qora bench ssb runs its parallax fit there when the environment exists).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .py4dstem/bin/python ]; then
  "$PYTHON" -m venv .py4dstem
fi
.py4dstem/bin/python -m pip install -q --upgrade pip
.py4dstem/bin/python -m pip install -q "numpy<2" "py4DSTEM==0.14.18"
.py4dstem/bin/python -c "import py4DSTEM, numpy; print('py4DSTEM', py4DSTEM.__version__, 'numpy', numpy.__version__)"
