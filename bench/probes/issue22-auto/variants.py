"""Recipe variants on benchmark cases, 10 starts each (seed 0), scored as `qora bench phase-success` scores them.
usage: variants.py CASES STARTS OUT.json 'label=recipe' ..."""
import json, sys, time
from qora.bench import phase_success as ps
cases, starts, out = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
rows = {}
for item in sys.argv[4:]:
    label, recipe = item.split("=", 1)
    for name in cases:
        row = ps.run_case(ps.CASES[name], starts=starts, recipe=recipe, backend="cpu")
        rows[f"{name}/{label}"] = row
        print(f"{name} | {label} | {row['succeeded']}/{starts} below {row['bound']:.3f} | median {row['median_error']:.3f} | "
              f"errors {sorted(round(e, 3) for e in row['errors'])} | {row['s_per_start']:.1f} s/start", flush=True)
        json.dump({"starts": starts, "machine": "2-core shared Xeon (development machine)", "rows": rows,
                   "recipes": {k.split('/')[1]: v['recipe'] for k, v in rows.items()}}, open(out, "w"), indent=1)
