"""Issue 40's classes of bad input, run through the CLI as a user would (bench/probes/bad_inputs.py): every
case ends in one Error: line with status 2, or 130/143 within a second for a signal, with nothing left behind
and an existing output kept. Its first runs found four faults (docs/phase.md, "The bad-input table")."""

import importlib.util
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[1] / "bench" / "probes" / "bad_inputs.py"


@pytest.mark.slow
def test_every_bad_input_ends_in_one_line_and_loses_nothing(tmp_path):
    spec = importlib.util.spec_from_file_location("bad_inputs", PROBE)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    probe.STOP = 5.0  # a signalled command stops in 0.1-0.5 s alone; the suite's other workers share the cores
    table = tmp_path / "table.md"
    assert probe.main(str(table)) == 0, table.read_text()
    rows = [line for line in table.read_text().splitlines() if line.startswith("| ") and "verdict" not in line]
    assert len(rows) >= 34 and all("| ok |" in row for row in rows)
