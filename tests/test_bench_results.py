"""The newest committed result of every registered benchmark is complete.

Only the files git tracks in the checkout's bench/results/ count (every file there where there is no
git): a result someone wrote there and did not commit never fails the suite."""

import pytest

from qora.bench.common import committed_results_dir, newest_result
from qora.bench.registry import REQUIRED_CASES


@pytest.mark.parametrize("benchmark", sorted(REQUIRED_CASES))
def test_newest_result_lists_every_required_case(benchmark):
    found = newest_result(benchmark, committed_results_dir(), tracked=True)
    assert found is not None, f"no committed result of benchmark {benchmark!r} in {committed_results_dir()}"
    path, data = found
    missing = [c for c in REQUIRED_CASES[benchmark] if c not in data["cases"]]
    assert not missing, f"{path.name} lacks cases {missing}"
    assert data["device"].get("name"), f"{path.name} does not name its device"
    assert data.get("commit") and data.get("date")
