"""The newest committed result of every registered benchmark is complete."""

import pytest

from qora.bench.common import newest_result, results_dir
from qora.bench.registry import REQUIRED_CASES


@pytest.mark.parametrize("benchmark", sorted(REQUIRED_CASES))
def test_newest_result_lists_every_required_case(benchmark):
    found = newest_result(benchmark, results_dir())
    assert found is not None, f"no result of benchmark {benchmark!r} in {results_dir()}"
    path, data = found
    missing = [c for c in REQUIRED_CASES[benchmark] if c not in data["cases"]]
    assert not missing, f"{path.name} lacks cases {missing}"
    assert data["device"].get("name"), f"{path.name} does not name its device"
    assert data.get("commit") and data.get("date")
