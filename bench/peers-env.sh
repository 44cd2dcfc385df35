#!/usr/bin/env bash
# Make the peers' virtual environment (.peers/), kept apart from qora's own dependencies.
# Peers are benchmark-only: JAX (CPU build here; the GPU machine has its own JAX) and ODTbrain.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .peers/bin/python ]; then
  "$PYTHON" -m venv .peers
fi
.peers/bin/python -m pip install -q --upgrade pip
.peers/bin/python -m pip install -q "jax[cpu]" numpy scipy odtbrain
.peers/bin/python -c "import jax; print('peers env: jax', jax.__version__, jax.devices())"
