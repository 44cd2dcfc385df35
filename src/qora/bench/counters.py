"""Nsight Compute counters of the phase variants (issue 4, the seed's counter table).

``bench/ncu-phase.sh OUTDIR`` runs, for each size and variant, ``python -m
qora.bench.counters target VARIANT SHAPE`` under ``ncu`` (hardware counters of every
kernel of a few HIO iterations, the graph replays included), then ``python -m
qora.bench.counters report OUTDIR`` turns the CSV files into a result JSON and a table:

- per variant, the DRAM bytes per element and iteration of the element-wise work (our
  kernels; for ``callback``, the callback pair's bytes minus the plain pair's), against the
  byte model (graph 45, half 25, mixed 37, callback 13);
- per kernel, time, DRAM bytes, L2 hit rate and % of peak DRAM and SM throughput.

Only the device runs this (CuPy and ncu); the parsing is plain Python and is tested on
the CPU machine.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import numpy as np

__all__ = ["METRICS", "OUR_KERNELS", "MODEL_BYTES", "parse_csv", "summarize", "target", "report"]

METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "launch__registers_per_thread",
    # the SMs' requests to L2 (32-byte sectors): what the byte model counts, whether or not the
    # L2 then goes to DRAM (written lines still in the 60 MiB L2 at a kernel's end are not DRAM
    # traffic yet, so DRAM bytes undercount the model where a volume fits the L2)
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum",
)
# Our kernels (kernels/phase.cu, and fused_fft.cu's line passes, which do the transforms too); every
# other kernel is cuFFT's
OUR_KERNELS = ("modulus_step", "update_step", "modulus_half", "update_half", "update_mixed", "to_half",
               "from_half", "reduce_slots", "strided_forward", "strided_inverse", "strided_modulus",
               "strided_split", "contig_forward", "contig_update")
MODEL_BYTES = {"graph": 45, "half": 25, "mixed": 37, "callback": 13}
ITERATIONS = 10  # a chunk's first and last steps differ in the callback variant: amortize them


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def target(variant: str, shape, iterations: int = ITERATIONS) -> None:
    """Run ``iterations`` HIO iterations of ``variant`` (or a bare fp32 cuFFT pair, ``"pair"``)
    between cudaProfilerStart and Stop, after the same call once unprofiled (plans, graph)."""
    from qora.backend import resolve
    from qora.bench.phase import BETA, _cuda_engine_runner, workload

    be = resolve("cuda")
    xp = be.xp
    if variant == "pair":
        plan = be.fft.c2c(tuple(shape), np.complex64)
        x = xp.asarray(workload(shape)[2])

        def run():
            for _ in range(iterations):
                plan.forward(x, out=x)
                plan.inverse(x, out=x)
    else:
        if variant == "callback-load":
            from qora.phase.cuda import CallbackEngine

            amp, support, x0 = workload(tuple(shape))
            engine = CallbackEngine(amp, support, 1, mode="load")
            engine.set_x(x0[None])

            def run():
                engine.iterate(iterations, 1.0, -BETA)
        else:
            _, it = _cuda_engine_runner(variant, tuple(shape))

            def run():
                it(iterations)

    run()
    be.synchronize()
    runtime = xp.cuda.runtime
    runtime.profilerStart()
    run()
    be.synchronize()
    runtime.profilerStop()


def parse_csv(text: str) -> list[dict]:
    """The kernels of an ``ncu --csv --page raw --print-units base`` log: one dict per launch
    with ``name`` and the metrics as floats (the units row and ==PROF== lines skipped)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    name_col = header.index("Kernel Name")
    out = []
    for row in rows[1:]:
        if not row[0].strip() or not row[0].strip().isdigit():  # the units row
            continue
        rec = {"name": row[name_col]}
        for m in METRICS:
            if m in header:
                cell = row[header.index(m)].replace(",", "")
                try:
                    rec[m] = float(cell)
                except ValueError:
                    rec[m] = float("nan")
        out.append(rec)
    return out


def _mean(values) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _short(name: str) -> str:
    for k in OUR_KERNELS:
        if k in name:
            return k
    return name.split("(")[0].split("<")[0].replace("void ", "").strip()[:40] or "kernel"


def summarize(kernels: list[dict], n_elements: int, iterations: int = ITERATIONS) -> dict:
    """Per iteration: totals of our kernels and of cuFFT's, and a per-kernel-name table."""
    per = {}
    totals = {"ours": [0.0, 0.0, 0.0], "cufft": [0.0, 0.0, 0.0], "other": [0.0, 0.0, 0.0]}  # DRAM B, ns, L2 B
    for k in kernels:
        name = _short(k["name"])
        b = k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)
        t = k.get("gpu__time_duration.sum", 0.0)
        l2 = 32.0 * (k.get("lts__t_sectors_srcunit_tex_op_read.sum", 0.0)
                     + k.get("lts__t_sectors_srcunit_tex_op_write.sum", 0.0))
        group = "ours" if name in OUR_KERNELS else "other" if name.startswith("cupy_") else "cufft"
        totals[group][0] += b
        totals[group][1] += t
        totals[group][2] += l2
        entry = per.setdefault(name, {"launches": 0, "bytes": 0.0, "ns": 0.0, "l2_hit": [], "dram_pct": [],
                                      "sm_pct": [], "sectors_per_request": [], "registers": 0})
        entry["launches"] += 1
        entry["bytes"] += b
        entry["ns"] += t
        entry["l2_hit"].append(k.get("lts__t_sector_hit_rate.pct", float("nan")))
        entry["dram_pct"].append(k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", float("nan")))
        entry["sm_pct"].append(k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", float("nan")))
        req = k.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 0.0)
        sec = k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0.0)
        entry["sectors_per_request"].append(sec / req if req else float("nan"))
        entry["registers"] = int(k.get("launch__registers_per_thread", 0) or 0)
    table = {}
    for name, e in per.items():
        table[name] = {
            "launches_per_iteration": e["launches"] / iterations,
            "us_per_iteration": e["ns"] / iterations / 1e3,
            "bytes_per_element": e["bytes"] / iterations / n_elements,
            "l2_hit_pct": _mean(e["l2_hit"]),
            "dram_pct_of_peak": _mean(e["dram_pct"]),
            "sm_pct_of_peak": _mean(e["sm_pct"]),
            "load_sectors_per_request": _mean(e["sectors_per_request"]),
            "registers": e["registers"],
        }
    return {
        "ours_bytes_per_element": totals["ours"][0] / iterations / n_elements,
        "ours_us": totals["ours"][1] / iterations / 1e3,
        "ours_l2_bytes_per_element": totals["ours"][2] / iterations / n_elements,
        "cufft_bytes_per_element": totals["cufft"][0] / iterations / n_elements,
        "cufft_us": totals["cufft"][1] / iterations / 1e3,
        "kernels": table,
    }


def report(directory, *, write: bool = True, echo=print):
    """Read ``VARIANT-SHAPE.csv`` files from ``directory``; write the phase-counters result."""
    from qora.backend import resolve
    from qora.bench.common import BenchResult

    directory = Path(directory)
    runs: dict[str, dict[str, dict]] = {}
    for path in sorted(directory.glob("*.csv")):
        variant, label = path.stem.rsplit("-", 1)
        kernels = parse_csv(path.read_text(errors="replace"))
        if kernels:
            runs.setdefault(label, {})[variant] = summarize(kernels, int(np.prod(_shape(label))))
    try:
        device = resolve("cuda").device_facts().as_dict()
    except Exception:  # the report can be remade on a machine without the GPU
        device = {"name": "unknown"}
    result = BenchResult("phase-counters", "cuda", device, columns=("bytes_per_element", "model", "ratio"))
    for label, variants in runs.items():
        pair = variants.get("pair")
        for variant, s in variants.items():
            if variant == "pair":
                result.add(f"counters/{label}/pair", bytes_per_element=s["cufft_bytes_per_element"],
                           us=s["cufft_us"], kernels=s["kernels"])
                continue
            if variant.startswith("callback"):
                if pair is None:
                    continue
                measured = s["cufft_bytes_per_element"] + s["ours_bytes_per_element"] - pair["cufft_bytes_per_element"]
            else:
                measured = s["ours_bytes_per_element"]
            if variant == "fused_fft":
                from qora.bench.phase import fused_fft_bytes

                model = fused_fft_bytes(_shape(label))  # transforms and element-wise work together
            else:
                model = MODEL_BYTES.get(variant.split("-")[0])
            l2 = None if variant.startswith("callback") else s["ours_l2_bytes_per_element"]
            result.add(f"counters/{label}/{variant}", bytes_per_element=measured, model=model,
                       ratio=measured / model if model else None, l2_bytes_per_element=l2,
                       l2_ratio=l2 / model if l2 and model else None, elementwise_us=s["ours_us"],
                       cufft_us=s["cufft_us"], cufft_bytes_per_element=s["cufft_bytes_per_element"],
                       kernels=s["kernels"])
        for variant, s in variants.items():
            for name, k in s["kernels"].items():
                echo(f"  {label:>12} {variant:>9} {name:<40} {k['us_per_iteration']:8.1f} us "
                     f"{k['bytes_per_element']:6.1f} B/el  L2 hit {k['l2_hit_pct']:5.1f}%  "
                     f"DRAM {k['dram_pct_of_peak']:5.1f}%  SM {k['sm_pct_of_peak']:5.1f}%  "
                     f"{k['load_sectors_per_request']:4.1f} sec/req  {k['registers']} regs")
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["metrics"]:
        print(",".join(METRICS))
    elif argv[:1] == ["target"] and len(argv) >= 3:
        iterations = int(argv[argv.index("--iterations") + 1]) if "--iterations" in argv else ITERATIONS
        target(argv[1], _shape(argv[2]), iterations)
    elif argv[:1] == ["report"] and len(argv) == 2:
        report(argv[1])
    else:
        print("usage: python -m qora.bench.counters metrics | target VARIANT SHAPE [--iterations K] | report DIR",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
