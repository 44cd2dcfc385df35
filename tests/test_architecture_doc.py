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
