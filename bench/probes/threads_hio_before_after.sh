#!/bin/bash
# HIO ms per iteration at 1024^2 and 2048^2, before (BEFORE_SRC: a checkout's src of the commit before
# issue 28) and after (this checkout's src), on 1 core (taskset -c 0) and 2 cores (taskset -c 0,1):
# the affinity mask is the one thread limit both versions honour. Interleaved rounds, ducc0 in both
# (FFTW off: its per-process planning would dominate). Each line: round, version, cores, load average,
# {shape: ms}. Usage: BEFORE_SRC=/tmp/before/src bench/probes/threads_hio_before_after.sh [rounds]
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
AFTER_SRC=$PWD/src
for r in $(seq 1 "${1:-5}"); do
  for v in before after; do
    for c in 0 0,1; do
      if [ $v = before ]; then P=$BEFORE_SRC; else P=$AFTER_SRC; fi
      res=$(QORA_DISABLE_FFTW=1 PYTHONPATH=$P taskset -c $c "$PY" -c '
import sys, json, time
import qora.phase.cpu
from qora.bench.phase import _ours, _iterations_for
from qora.bench.common import time_peer
out = {}
for label in ("1024x1024", "2048x2048"):
    ours = _ours(tuple(int(v) for v in label.split("x")))
    t0 = time.perf_counter(); ours(2); n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2, 0.2)
    out[label] = time_peer(ours, n, best_of=3)
print(json.dumps(out))' 2>&1 | tail -1)
      echo "$r $v $c $(cut -d' ' -f1 /proc/loadavg) $res"
    done
  done
done
