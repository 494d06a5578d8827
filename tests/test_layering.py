"""The one-way dependencies of the tree, checked on the source: the runtime never reaches the
operators, and nothing outside the application reaches the application."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (also inside functions and TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def offenders(package: str, forbidden: str, *, skip: str | None = None) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if skip is not None and relative.startswith(skip):
            continue
        hits = sorted(
            m for m in imported_modules(path) if m == forbidden or m.startswith(forbidden + ".")
        )
        if hits:
            bad[relative] = hits
    return bad


def test_the_source_tree_is_where_this_test_looks() -> None:
    assert (ROOT / "region" / "controller.py").is_file()
    assert (ROOT / "operators" / "app" / "cli.py").is_file()
    # And the check sees an import when there is one.
    assert "operators.app.config" in imported_modules(ROOT / "operators" / "app" / "cli.py")


def test_region_never_imports_the_operators() -> None:
    assert offenders("region", "operators") == {}


def test_only_the_application_imports_the_application() -> None:
    # The operators, fs, spark and testing packages work without the command line.
    assert offenders("operators", "operators.app", skip="operators/app/") == {}


def test_benchmarks_never_import_the_tests() -> None:
    # The WebHDFS stand-in and every shared helper live in the package (operators.testing).
    assert offenders("bench", "tests") == {}
