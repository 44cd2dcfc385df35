#!/usr/bin/env bash
# The device machine's run for this tree (run from the checkout root there): the GPU tests named in
# $TESTS (default: all), then the benchmarks named in $BENCH, each under its own time limit so that a
# slow one leaves the others' results. Results and logs go to ${OUT:-/tmp/qora-out}.
#   TESTS="tests/ssb" BENCH="phase-threads ssb-live" bash bench/device-run.sh
set -u
OUT=${OUT:-/tmp/qora-out}
mkdir -p "$OUT/results"
# .whl (git-ignored, carried): the wheels the device lacks, for its Python 3.12: click, ducc0, h5py, numcodecs, pyzmq,
# tifffile, tqdm, and fabio (the ESRF logo's EDF files: phase-logo and envelope-timing fail without it)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheels did not install"; exit 3; }
fi
export PYTHONPATH=src:/tmp/site QORA_PEERS_PYTHON=${QORA_PEERS_PYTHON:-python3} QORA_COMMIT=${QORA_COMMIT:-unknown}
Q="python3 -m qora"
if [ -n "${TESTS-all}" ]; then
  [ "${TESTS-all}" = all ] && TESTS="tests --ignore=tests/viewer --ignore=tests/test_tutorials.py"
  # shellcheck disable=SC2086
  QORA_REQUIRE_GPU=1 timeout "${TEST_LIMIT:-420}" python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu -n 6 -rf \
    $TESTS > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests rc=$?: $(tail -1 "$OUT/gpu-tests.log")"
  grep -E "^FAILED|^ERROR" "$OUT/gpu-tests.log" | head -20
fi
# shellcheck disable=SC2086
for b in ${BENCH:-}; do
  case $b in
    phase-threads) timeout 200 $Q bench --out "$OUT/results" phase --backend cpu --threads 1,2,4,8,16 \
                     --shapes 1024x1024,2048x2048,128x128x128 ;;
    holo-threads) timeout 150 $Q bench --out "$OUT/results" holo --backend cpu --threads 1,16 --size 188 --angles 180 \
                    --rounds 1 ;;
    ssb-threads) timeout 90 $Q bench --out "$OUT/results" ssb --backend cpu --threads 1,2,4,8,16 ;;
    holo-cuda) timeout 300 $Q bench --out "$OUT/results" holo --backend cuda ${HOLO_PARTS:+--parts $HOLO_PARTS} ;;
    phase-switch) timeout 200 python3 bench/probes/phase_switch_spread.py 5 ;;
    fdtd-cell) timeout 300 python3 bench/probes/fdtd_cell_probe.py .odt-data/fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma \
                 cuda gp tv plain tv:0.08 ;;
    # .bragg-data/cohere_crop144.npy: OUT_DIR/crop.npy of `bragg_floor_probe.py prep SCAN.tar.xz OUT_DIR` (cohere's preparation)
    bragg-cohere) timeout 400 python3 bench/probes/bragg_crop_probe.py .bragg-data/cohere_crop144.npy cuda 10 ${BRAGG_RECIPES:-default} ;;
    bragg-models) timeout "${BRAGG_LIMIT:-240}" python3 bench/probes/bragg_models_probe.py .bragg-data/cohere_crop144.npy cuda 10 0 \
                    ${BRAGG_RUNS:-default} ;;
    bragg-crop) timeout 400 python3 bench/probes/bragg_crop_probe.py .bragg-data/scan54_crop128.npy cuda 4 ${BRAGG_RECIPES:-default cohere} ;;
    envelope-timing) QORA_CDI_DATA=${QORA_CDI_DATA:-.cdi-data} timeout 200 python3 bench/probes/envelope_timing.py cuda 10 ;;
    phase-logo) QORA_CDI_DATA=${QORA_CDI_DATA:-.cdi-data} timeout 300 $Q bench --out "$OUT/results" phase-success \
                  --backend cuda --cases esrf_logo,lithograph_256_box,lithograph_512_box --starts 10 ;;
    phase-logo-envelope) QORA_CDI_DATA=${QORA_CDI_DATA:-.cdi-data} timeout 300 $Q bench --out "$OUT/results" \
                           phase-success --backend cuda --cases esrf_logo,lithograph_256_box,lithograph_512_box \
                           --starts 10 --recipe real-envelope ;;
    phase-success) timeout 300 $Q bench --out "$OUT/results" phase-success --backend cuda --cases all --starts 10 ;;
    phase-success-cohere) QORA_COHERE_PYTHON=$(command -v python3) PYTHONPATH=$PYTHONPATH:.peers timeout 400 $Q bench \
                            --out "$OUT/results" phase-success --backend cuda --cases all --starts 10 --peer cohere ;;
    ssb-live) timeout 240 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 128 --detector 192 ;;
    ssb-live-stages) timeout 120 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 128 --detector 192 \
                       --stages-only ;;
    phase-fused-default) timeout 150 python3 bench/probes/fused_fft_probe.py --candidates plain --no-passes \
                           --out "$OUT/results/phase-fused" ;;
    bpm-fused-default) timeout 150 python3 bench/probes/bpm_fused_probe.py --candidates "" --out "$OUT/results/bpm-fused" ;;
    ssb-live-receivers) timeout 200 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 --detector 192 \
                          --protocol dectris2 --receivers 4 --senders 2; timeout 200 $Q bench --out "$OUT/results" \
                          ssb-live --backend cuda --scan 512 --detector 192 --protocol dectris2 --receivers 4 \
                          --senders 2 --batch 2048 ;;
    ssb-live-receivers-swap) timeout 200 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 --detector 192 \
                          --protocol dectris2 --receivers 4 --senders 2 --batch 2048; timeout 200 $Q bench --out \
                          "$OUT/results" ssb-live --backend cuda --scan 512 --detector 192 --protocol dectris2 \
                          --receivers 4 --senders 2 ;;
    live-to-g) for c in ${LIVE_CONFIGS:-4:1024 4:2048 8:2048 4:1024 4:2048}; do  # each setting in a fresh process, then warm
                 timeout 100 python3 bench/probes/live_to_g_probe.py --configs $c --repeats 2; done ;;
    phase-fused) timeout 280 python3 bench/probes/fused_fft_probe.py --out "$OUT/results/phase-fused" ;;
    phase-fused-ncu) QORA_NCU_VARIANTS="fused_fft graph" QORA_NCU_SHAPES="256x256x256 2048x2048" \
                       QORA_RESULTS_DIR="$OUT/results" timeout 300 bash bench/ncu-phase.sh "$OUT/ncu" ;;
    bpm-resident) timeout 200 python3 bench/probes/bpm_fused_probe.py --candidates "" --column-ept 16 --resident 2,1 \
                    --out "$OUT/results/bpm-resident" ;;
    bpm-resident-ncu) for n in ${QORA_NCU_SIZES:-128 256}; do timeout 150 ncu --clock-control none -k regex:bpm_resident \
                        --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
                        --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters \
                        --section MemoryWorkloadAnalysis python3 bench/probes/bpm_resident_target.py $n forward; done ;;
    bpm-graph) timeout 200 python3 bench/probes/bpm_graph_probe.py ;;
    bpm-lanes) timeout 300 python3 bench/probes/bpm_lanes_probe.py --sizes "${LANES_SIZES:-256,128}" \
                 --out "$OUT/results/bpm-fused" ;;
    bpm-fused) timeout 240 python3 bench/probes/bpm_fused_probe.py --out "$OUT/results/bpm-fused" ;;
    bpm-fused-ncu) QORA_NCU_KINDS="bpm_fused_forward bpm_fused_gradient" QORA_NCU_SIZES=256 \
                     QORA_RESULTS_DIR="$OUT/results" timeout 300 bash bench/ncu-holo.sh "$OUT/ncu" python3 ;;
    phase-loops) timeout 120 python3 bench/probes/phase_loops_threads.py ;;
    crystal) timeout 400 $Q bench --out "$OUT/results" phase-success --backend cuda --cases crystal_128 --starts 10 \
               --consensus 5 --figures "$OUT/figures" ;;
    ssb-full) timeout 400 $Q bench --out "$OUT/results" ssb-full --dir /tmp/qora-ssb-full ;;
    prepare-floor) timeout 300 python3 bench/probes/prepare_floor.py /tmp/qora-ssb-full ${PREPARE_BEFORE:-} ;;
    holo-measured) QORA_ODT_DATA=${QORA_ODT_DATA:-.odt-data} timeout 200 $Q bench --out "$OUT/results" holo-measured \
                     --backend cuda ;;
    ssb-agreement-ncu) timeout 240 ncu --clock-control none -k regex:band_quad_batch --launch-count 1 \
                         --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
                         --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
                         --section InstructionStats --section SourceCounters $Q bench ssb-full --dir /tmp/qora-ssb-full \
                         --kernels-only --no-write ;;
    band-ab) timeout 240 python3 bench/probes/band_ab.py /tmp/qora-ssb-full ${BAND_BEFORE:-bench/probes/_band_before.cu} ;;
    ssb-cuda) timeout 300 $Q bench --out "$OUT/results" ssb --backend cuda ;;
    ssb-methods-cuda) timeout 200 $Q bench --out "$OUT/results" ssb-methods --backend cuda \
                        --data tests/ssb/fixtures/abtem_srtio3_wdd.npz --seeds 3 ;;
    ssb-ptycho) timeout "${PTYCHO_LIMIT:-300}" $Q bench --out "$OUT/results" ssb-ptycho --backend cuda \
                  $(for b in ${PTYCHO_BATCHES:-}; do printf -- '--batch %s ' "$b"; done) ;;
    ptycho-kernels) timeout 200 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
                      --print-summary per-kernel python3 bench/probes/ptycho_batch_kernels.py "${PTYCHO_BATCH:-16}" 2 \
                      || timeout 100 python3 bench/probes/ptycho_batch_kernels.py "${PTYCHO_BATCH:-16}" 2 ;;
    ssb-methods-full) timeout 400 python3 bench/probes/ssb_methods_fullscale.py /tmp/qora-ssb-full ;;
    ptycho-quantem) P=src/qora/bench/peers/ptycho_quantem.py F=tests/ssb/fixtures/abtem_srtio3_ptycho_8a.npz
                    timeout 120 python3 $P $F "$OUT/quantem-8a.npz" --device cuda && python3 bench/probes/ptycho_peer_score.py \
                      $F "$OUT/quantem-8a.npz"
                    for b in ${QUANTEM_BATCHES:-64 16}; do timeout 200 python3 $P --timing --positions 16384 --detector 128 \
                      --slices 10 --modes 4 --iterations 3 --batch $b --device cuda; done ;;
    ptycho-ptyrad) P=src/qora/bench/peers/ptycho_ptyrad.py F=tests/ssb/fixtures/abtem_srtio3_ptycho_8a.npz
                   timeout 200 python3 $P $F "$OUT/ptyrad-8a.npz" --device cuda && python3 bench/probes/ptycho_peer_score.py \
                     $F "$OUT/ptyrad-8a.npz"
                   for b in ${PTYRAD_BATCHES:-64 16}; do timeout 200 python3 $P --timing --positions 16384 --detector 128 \
                     --slices 10 --modes 4 --iterations 3 --batch $b --device cuda; done ;;
    ssb-methods-quantem) timeout "${QUANTEM_LIMIT:-300}" python3 bench/probes/ssb_methods_fullscale.py /tmp/qora-ssb-full \
                           --peer python3 ${QUANTEM_CROP:+--crop $QUANTEM_CROP} ;;
    ssb-methods-cuda-quantem) QORA_QUANTEM_PYTHON=$(command -v python3) QORA_QUANTEM_DEVICE=cuda timeout 300 $Q bench \
                                --out "$OUT/results" ssb-methods --backend cuda --data tests/ssb/fixtures/abtem_srtio3_wdd.npz \
                                --seeds 3 ;;
    ssb-incoherent) timeout 300 python3 bench/probes/incoherent_cost.py /tmp/qora-ssb-full ;;
    incoherent-kernels) timeout 200 python3 bench/probes/incoherent_kernel_timing.py ;;
    ssb-profile) timeout 400 python3 bench/probes/ssb_steps_profile.py /tmp/qora-ssb-full ;;
    incoherent-stages) timeout 300 python3 bench/probes/incoherent_stages.py /tmp/qora-ssb-full ;;
    incoherent-parts) timeout 300 python3 bench/probes/incoherent_parts.py /tmp/qora-ssb-full ;;
    coarse-rows) timeout 400 python3 bench/probes/coarse_rows_probe.py /tmp/qora-ssb-full ;;
    ssb-live-512) timeout 580 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 --detector 192 \
                    --dataset-dir /tmp/qora-ssb-full --receivers 4 --senders 2 --final-fps 40000 ;;
    live-first-scan) timeout 150 python3 bench/probes/live_first_scan.py -- --out "$OUT/results" --backend cuda --scan 512 \
                       --detector 192 --protocol dectris2 --receivers 4 --senders 2 ;;
    ssb-live-five) for run in $(seq "${LIVE_RUNS:-5}"); do  # issue 38's command, each run a fresh process (the first on a fresh machine)
                     echo "== run $run"; timeout 115 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 \
                       --detector 192 --protocol dectris2 --receivers 4 --senders 2; echo "== run $run rc=$?"; done ;;
    ssb-live-methods) timeout "${LIVE_LIMIT:-200}" $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 \
                        --detector 192 --protocol dectris2 \
                        $(for r in ${LIVE_RECEIVERS:-4}; do printf -- '--receivers %s ' "$r"; done) \
                        --senders "${LIVE_SENDERS:-2}" --method obf --method icom --method ssb ;;
    ssb-live-512-final) timeout 300 $Q bench --out "$OUT/results" ssb-live --backend cuda --scan 512 --detector 192 \
                          --dataset-dir /tmp/qora-ssb-full --protocol none --final-fps 40000 ;;
    bslz4) timeout 120 python3 bench/probes/bslz4_device_probe.py --detector 192 --repeats 20 ;;
    bpm-rotation) timeout 120 python3 bench/probes/holo_bpm_rotation.py 48 60 cuda 20; timeout 150 python3 bench/probes/holo_bpm_rotation.py 128 180 cuda 0 cufft; timeout 150 python3 bench/probes/holo_bpm_rotation.py 128 180 cuda 0 fused_fft ;;
    *) echo "unknown benchmark $b" ;;
  esac > "$OUT/bench-$b.log" 2>&1
  echo "bench $b rc=$?"; tail -4 "$OUT/bench-$b.log"
done
