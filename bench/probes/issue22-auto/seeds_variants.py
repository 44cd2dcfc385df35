"""Few-photon recipe variants on triangle_256_1e6 over several seeds (the seed draws both the counts and the starts),
10 starts each, CPU, scored as `qora bench phase-success` scores them (aligned object error, bound 0.2; the reference
from the truth is 0.034 on this case, so its bound is the fixed 0.2). Per start: error, final support size, and the
size guard's retunes.
usage: seeds_variants.py SEEDS STARTS OUT.json 'label=recipe' ...   (SEEDS comma-separated; recipe 'default' = the solver's pick)"""
import collections, json, sys, time
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct

seeds, starts, out = [int(s) for s in sys.argv[1].split(",")], int(sys.argv[2]), sys.argv[3]
case = ps.CASES["triangle_256_1e6"]
truth = case.object()
rows = {}
for item in sys.argv[4:]:
    label, recipe = item.split("=", 1)
    for seed in seeds:
        counts, mask = ps.record(truth, case.detector, seed=seed)
        t0 = time.perf_counter()
        r = reconstruct(counts, mask=mask, recipe=recipe, starts=starts, backend="cpu", seed=seed, keep_all=True)
        sec = (time.perf_counter() - t0) / starts
        errors = [float(ps.aligned_error(o, truth)) for o in r.objects]
        sizes = [int(s.sum()) for s in r.supports]
        log = collections.Counter((e["start"], e["status"]) for e in r.support_log)
        ok = sum(e < 0.2 for e in errors)
        rows[f"{label}/seed{seed}"] = {"recipe": r.recipe, "seed": seed, "succeeded": ok, "errors": errors,
                                       "support_sizes": sizes, "s_per_start": sec,
                                       "median_error": float(np.median(errors)),
                                       "final_errors": [float(x) for x in r.final_errors],
                                       "retunes": {f"{k[0]}:{k[1]}": v for k, v in log.items()}}
        print(f"{label} | seed {seed} | {ok}/{starts} below 0.2 | median {np.median(errors):.3f} | {sec:.1f} s/start", flush=True)
        for i in np.argsort(errors):
            print(f"    start {i}: error {errors[i]:.3f} fourier {r.final_errors[i]:.4f} support {sizes[i]} "
                  f"retunes {dict((k[1], v) for k, v in log.items() if k[0] == i)}", flush=True)
        json.dump({"case": "triangle_256_1e6", "starts": starts, "machine": "2-core shared Xeon (development machine)",
                   "rows": rows}, open(out, "w"), indent=1)
