import json, sys, time
from qora.bench import phase_success as ps
recipe, starts, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cases = sys.argv[4].split(",")
rows = {}
for name in cases:
    t = time.time()
    row = ps.run_case(ps.CASES[name], starts=starts, recipe=recipe, backend="cpu", reference=False)
    rows[name] = row
    print(name, recipe, "errors", [round(e, 3) for e in row["errors"]], "s/start %.1f" % row["s_per_start"], flush=True)
    json.dump({"recipe": recipe, "starts": starts, "machine": "2-core shared Xeon", "rows": rows}, open(out, "w"), indent=1)
