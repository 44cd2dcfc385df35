#!/usr/bin/env bash
# Nsight Compute counters of the phase variants at 2048^2 and 256^3 (issue 4).
# On the device, from the repository root:  PYTHONPATH=src bash bench/ncu-phase.sh OUTDIR [PYTHON]
# One ncu process per (variant, size), three HIO iterations each; then the report
# (qora.bench.counters) writes the phase-counters result JSON to $QORA_RESULTS_DIR.
set -euo pipefail
out=${1:?usage: bench/ncu-phase.sh OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
metrics=$("$py" -m qora.bench.counters metrics)
for shape in ${QORA_NCU_SHAPES:-2048x2048 256x256x256}; do
  for variant in ${QORA_NCU_VARIANTS:-pair graph half mixed callback callback-load}; do
    ncu --clock-control none --profile-from-start off --print-units base --csv --page raw \
        --metrics "$metrics" --log-file "$out/$variant-$shape.csv" \
        "$py" -m qora.bench.counters target "$variant" "$shape" >"$out/$variant-$shape.log" 2>&1 \
      || { echo "ncu failed for $variant $shape:"; tail -20 "$out/$variant-$shape.log"; }
  done
done
"$py" -m qora.bench.counters report "$out"
