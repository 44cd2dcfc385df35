"""other_blurs.py with the sharpening rule S = factor x fitted width instead of width + 0.1 (monkeypatched).

    PYTHONPATH=src python bench/probes/issue22-auto/other_blurs_rule.py 0.3,0.5,1.0 10 1.2
"""
import sys
from pathlib import Path

from qora.phase import recipe as rc

sys.path.insert(0, str(Path(__file__).parent))
from other_blurs import run  # noqa: E402  (the probe beside this one)

factor = float(sys.argv[3])
rc.partial_coherence_recipe = lambda width=None: rc.Recipe.parse(
    rc.SHARPENED_SEARCH_RECIPE.format(sharpen=round(factor * width, 3)))
run([float(s) for s in sys.argv[1].split(",")], int(sys.argv[2]), label=f"S = {factor} w | ", recipe_chars=110)
