"""One success-rate case run start by start, each start saved as it ends, then collected into the
benchmark's result file: for a case whose starts take minutes on a shared machine (``crystal_128`` on two
cores), so that a run cut short keeps what it finished and can be resumed or spread over processes.

Start s here is the start s of ``qora bench phase-success`` (the same pattern, ``first_start=s``, so
``PCG64(seed + s)``); the collected row has the fields of :func:`qora.bench.phase_success.run_case`,
with the best start chosen as a single run chooses it (lowest final Fourier error).

    PYTHONPATH=src python bench/probes/phase_success_by_start.py run crystal_128 0 10 /tmp/starts
    QORA_RESULTS_DIR=bench/results PYTHONPATH=src python bench/probes/phase_success_by_start.py \\
        collect crystal_128 /tmp/starts --consensus 5 --figure docs/img/phase-crystal-128.png
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult
from qora.bench.phase_success import CASES, SUCCESS_BOUND, aligned_error, slices_figure
from qora.phase import analysis
from qora.phase.detector import record
from qora.phase.solver import Solver


def run(name: str, first: int, last: int, folder: Path, recipe=None) -> None:
    case = CASES[name]
    truth = case.object()
    counts, mask = record(truth, case.detector, seed=0)
    solver = Solver(counts, mask=mask, backend="cpu", seed=0)
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(first, last):
        t0 = time.perf_counter()
        r = solver.run(recipe=recipe, starts=1, seed=0, first_start=s, keep_all=True)
        seconds = time.perf_counter() - t0
        error = aligned_error(r.object, truth)
        np.savez_compressed(folder / f"start{s:02d}.npz", object=r.object, support=r.support,
                            final_error=r.final_errors[0], seconds=seconds, error=error, recipe=r.recipe,
                            log=json.dumps(r.support_log))
        print(f"start {s}: error {error:.4f} fourier {r.final_errors[0]:.4f} support {int(r.support.sum())} "
              f"{seconds:.0f} s retunes {len(r.support_log)}", flush=True)


def collect(name: str, folder: Path, *, consensus: int, figure: Path | None, write: bool) -> dict:
    case = CASES[name]
    truth = case.object()
    files = sorted(folder.glob("start*.npz"))
    if not files:
        raise SystemExit(f"no start*.npz in {folder}")
    data = [np.load(f) for f in files]
    objects = np.stack([d["object"] for d in data])
    final = np.array([float(d["final_error"]) for d in data])
    errors = [float(d["error"]) for d in data]
    ok = [e < SUCCESS_BOUND for e in errors]
    best = int(np.argmin(final))
    row = {"success": float(np.mean(ok)), "succeeded": int(sum(ok)), "starts": len(data),
           "s_per_start": float(np.mean([float(d["seconds"]) for d in data])),
           "median_error": float(np.median(errors)), "best_error": float(min(errors)), "errors": errors,
           "retunes": int(sum(len(json.loads(str(d["log"]))) for d in data)), "shape": list(truth.shape),
           "photons": case.detector.photons, "recipe": str(data[0]["recipe"]), "best_start": best,
           "best_start_error": errors[best], "final_errors": final.tolist(),
           "start_ids": [int(f.stem[5:]) for f in files]}
    if consensus > 1:
        agreement = analysis.consensus(objects, final, keep=consensus)
        row.update(consensus_starts=[row["start_ids"][i] for i in agreement["starts"]],
                   consensus_errors=agreement["errors"].tolist(), consensus_median=agreement["median"],
                   consensus_max=agreement["max"])
    if figure is not None:
        slices_figure(objects[best], truth, figure,
                      title=f"{name}: best of {len(data)} starts by Fourier error, object error {errors[best]:.3f}")
    if write:
        be = resolve("cpu")
        result = BenchResult("phase-success", be.name, be.device_facts().as_dict(),
                             columns=("success", "s_per_start", "median_error", "retunes"))
        result.notes["success_bound"] = SUCCESS_BOUND
        result.notes["recipe_label"] = "default"
        result.notes["how"] = "bench/probes/phase_success_by_start.py: starts run one at a time, then collected"
        result.add(f"{name}/default", **row)
        print(f"result written to {result.write()}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("case", choices=sorted(CASES))
    p_run.add_argument("first", type=int)
    p_run.add_argument("last", type=int)
    p_run.add_argument("folder", type=Path)
    p_run.add_argument("--recipe", default=None)
    p_col = sub.add_parser("collect")
    p_col.add_argument("case", choices=sorted(CASES))
    p_col.add_argument("folder", type=Path)
    p_col.add_argument("--consensus", type=int, default=5)
    p_col.add_argument("--figure", type=Path, default=None)
    p_col.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.command == "run":
        run(args.case, args.first, args.last, args.folder, args.recipe)
    else:
        row = collect(args.case, args.folder, consensus=args.consensus, figure=args.figure, write=not args.no_write)
        print(json.dumps({k: v for k, v in row.items() if k not in ("consensus_errors",)}, indent=1))
        if "consensus_errors" in row:
            print(np.array2string(np.array(row["consensus_errors"]), precision=3))


if __name__ == "__main__":
    main()
