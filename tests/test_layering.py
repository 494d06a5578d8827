"""The one-way dependencies of the tree, checked on the source: the runtime never reaches the
operators, and nothing outside the application reaches the application."""

from __future__ import annotations

import ast
import re
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


def _modules(package: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (a name imported from a package counts as
    its submodule when there is one, else as the package)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.level:  # relative: from the module's package
                    base = name.split(".")[
                        : len(name.split(".")) - node.level + path.name.count("__init__")
                    ]
                    module = ".".join([*base, node.module])
                else:
                    module = node.module
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.add(sub if sub in modules else module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_runs_in_a_circle() -> None:
    # Imports inside functions count too: a circle there is a circle a refactor trips on.
    assert _cycles(_import_graph("operators")) == []
    assert _cycles(_import_graph("region")) == []
    # And the check sees one when there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _package_map() -> dict[str, set[str] | None]:
    """docs/development.md's package map: each package and the packages it may import
    (``None``: every one)."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("## The package map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str] | None] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            everything = cells[2] == "everything"
            rows[cells[0].strip("`")] = (
                None if everything else set(re.findall(r"`([\w.]+)`", cells[2]))
            )
    return rows


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "operators" and len(parts) > 1 else parts[0]


def test_the_package_map_in_the_docs_is_the_tree() -> None:
    # Every package of the tree has its row, and every row is a package.
    packages = {"region"} | {
        f"operators.{p.name}"
        for p in (ROOT / "operators").iterdir()
        if (p / "__init__.py").is_file()
    }
    assert set(_package_map()) == packages


def test_every_import_is_one_the_package_map_allows() -> None:
    allowed = _package_map()
    wrong = []
    for module, targets in sorted(_import_graph("operators").items()):
        mine = _package_of(module)
        if mine == "operators" or allowed[mine] is None:
            continue
        for target in sorted(targets):
            theirs = _package_of(target)
            if theirs not in (mine, "operators") and theirs not in (allowed[mine] or set()):
                wrong.append(f"{module} imports {target}")
    assert wrong == []
    # And the check sees a wrong one: the scan may not import the sink.
    assert "operators.sink" not in (allowed["operators.scan"] or set())
