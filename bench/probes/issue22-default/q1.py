import json, sys
from qora.bench import phase_success as ps
recipe, starts, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for name in sys.argv[4].split(","):
    row = ps.run_case(ps.CASES[name], starts=starts, recipe=None if recipe == "default" else recipe, backend="cpu")
    rows[name] = row
    print(name, recipe, row["recipe"], "%d/%d below %.3f (reference %.4f)" % (row["succeeded"], starts, row["bound"], row["reference_error"]),
          "errors", [round(e, 3) for e in row["errors"]], "s/start %.1f" % row["s_per_start"], flush=True)
    json.dump({"recipe": recipe, "starts": starts, "machine": "2-core shared Xeon", "rows": rows}, open(out, "w"), indent=1)
