"""The artefact policy (docs/architecture.md, "Results and artefacts"): main keeps under bench/results/
the newest result of each (benchmark, device, backend) and the older ones a doc cites by file name;
logs, profiler dumps and probe outputs are kept in main's history, out of its tree (bench/archive.sh)."""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("logs", "profiles", "probes")  # kept in history, out of the tree


def _tracked() -> list:
    try:
        out = subprocess.run(["git", "ls-files", "bench/results"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [Path(f) for f in out.split()]


def _key(path: Path, root: Path = ROOT):
    """(folder, benchmark, device, backend) and date of a result file; (None, "") for any other file."""
    try:
        data = json.loads((root / path).read_text())
    except (OSError, ValueError):
        return None, ""
    if not isinstance(data, dict) or "benchmark" not in data:
        return None, ""
    device = (data.get("device") or {}).get("name")
    return (path.parts[2], data["benchmark"], device, data.get("backend")), data.get("date", "")


def _loose(files, text: str, root: Path = ROOT) -> list:
    """The files the policy does not keep: neither the newest result of their key nor named in ``text``."""
    newest = {}
    for path in files:
        key, date = _key(path, root)
        if key is not None and (key not in newest or date > newest[key][0]):
            newest[key] = (date, path)
    keep = {path for _, path in newest.values()}
    return [p for p in files if p not in keep and p.name not in text]


def _cited_text() -> str:
    docs = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    return "\n".join(p.read_text() for p in docs if p.is_file())


def test_logs_profiles_and_probe_outputs_are_not_on_main():
    stray = [str(p) for p in _tracked() if len(p.parts) > 2 and p.parts[2] in OUTSIDE]
    assert not stray, f"these belong in history, out of the tree (bash bench/archive.sh PATH): {stray[:10]}"


def test_every_kept_result_is_the_newest_or_cited():
    loose = [str(p) for p in _loose([p for p in _tracked() if len(p.parts) > 3], _cited_text())]
    assert not loose, (f"{len(loose)} results neither the newest of their benchmark and device nor cited by a doc "
                       f"(git rm them: history keeps them): {loose[:10]}")


def test_the_rule_keeps_the_newest_and_the_cited_result(tmp_path):
    """Of three results of one benchmark and device the newest and the one a doc names are kept; a notes
    file no doc names is not; another device's older result is its own newest."""
    folder = tmp_path / "bench" / "results" / "b"
    folder.mkdir(parents=True)

    def result(name, date, device="d"):
        (folder / name).write_text(json.dumps({"benchmark": "b", "device": {"name": device}, "date": date}))
        return Path("bench/results/b") / name

    paths = [result("a.json", "2026-01-01"), result("b.json", "2026-02-01"), result("c.json", "2026-03-01"),
             result("e.json", "2025-01-01", device="other")]
    (folder / "notes.txt").write_text("x")
    paths.append(Path("bench/results/b/notes.txt"))
    assert _loose(paths, "see bench/results/b/a.json", tmp_path) == [paths[1], paths[4]]


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_every_history_citation_resolves():
    """Docs cite logs kept in main's history as SHA:bench/results/PATH (bench/archive.sh); each must name a file or
    folder of that commit (a glob or {a,b} form: some file under its fixed prefix)."""
    import re

    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("not a full git checkout")
    cited = set(re.findall(r"\b([0-9a-f]{7,40}):(bench/results/[A-Za-z0-9_.*{},/-]*[A-Za-z0-9_*}/-])", _cited_text()))
    assert len(cited) > 50  # the docs' evidence is cited this way (85 citations at 2026-12-04)
    missing = []
    for sha, path in sorted(cited):
        prefix = re.split(r"[*{]", path)[0]
        folder = prefix.rstrip("/").rsplit("/", 1)[0]
        listed = _git("ls-tree", "-r", "--name-only", sha, "--", folder).stdout.split()
        if not any(name.startswith(prefix) for name in listed):
            missing.append(f"{sha}:{path}")
    assert not missing, f"citations that name nothing in main's history: {missing[:10]}"


def test_the_branch_citations_are_gone():
    """The old form results:PATH named a branch that does not land with main."""
    import re

    old = re.findall(r"(?<![\w/])results:(?:logs|probes|profiles|superseded)/\S*", _cited_text())
    assert not old, f"citations of the results branch (use SHA:PATH, bench/archive.sh): {old[:10]}"
