#!/usr/bin/env bash
# Nsight Compute counters of the holography kernels (issue 6): the FGP variants, the GP
# kernels and the mapping kernels at 512^3 (and 256^3).
# On the device, from the repository root:  PYTHONPATH=src bash bench/ncu-holo.sh OUTDIR [PYTHON]
# Only our kernels are profiled (the regex); then the report writes the holo-counters JSON.
set -euo pipefail
out=${1:?usage: bench/ncu-holo.sh OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
metrics=$("$py" -m qora.bench.holo_counters metrics)
regex=$("$py" -m qora.bench.holo_counters regex)
for n in ${QORA_NCU_SIZES:-512 256}; do
  for kind in ${QORA_NCU_KINDS:-fused separate cube march gp mapping}; do
    ncu --clock-control none --profile-from-start off --print-units base --csv --page raw \
        --kernel-name "$regex" --metrics "$metrics" --log-file "$out/$kind-$n.csv" \
        "$py" -m qora.bench.holo_counters target "$kind" "$n" >"$out/$kind-$n.log" 2>&1 \
      || { echo "ncu failed for $kind $n:"; tail -20 "$out/$kind-$n.log"; }
  done
done
"$py" -m qora.bench.holo_counters report "$out"
