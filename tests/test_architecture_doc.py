"""docs/architecture.md names every module of the package (issue 41: it had left out about 15 modules and 48 by
name): a module added without its line in the map fails here."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_named_in_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "src" / "qora"
    modules = [p for p in sorted(package.rglob("*.py")) if p.name != "__init__.py" or p.parent == package]
    missing = [str(p.relative_to(package)) for p in modules if p.name not in doc]
    assert not missing, f"add a line for each to docs/architecture.md: {missing}"
    assert len(modules) > 150  # the walk found the package


def test_every_file_the_architecture_doc_names_exists():
    """The other direction: a module renamed or removed leaves no line behind (names, and paths from the root)."""
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    known = {p.name for folder in ("src", "tests", "bench", "docs") for p in (ROOT / folder).rglob("*.py")}
    names = set(re.findall(r"(?<![\w/.-])([A-Za-z_]\w*\.py)\b", doc))
    paths = set(re.findall(r"\b((?:tests|bench|src|docs)/[\w/.-]+\.py)\b", doc))
    assert names and paths  # the patterns found the doc's files
    assert sorted(names - known) == [], "the doc names files that do not exist"
    assert sorted(p for p in paths if not (ROOT / p).exists()) == [], "the doc gives paths that do not exist"
