"""The documentation cannot rot: every code block of the README and of ``docs/`` runs in a test
(TOML is validated by the settings models, JSON parsed, every ``hdfs-region`` command line parsed
by the real command's parser, Python executed), the configuration reference is what the models
generate, and every exception class of the code has its troubleshooting section."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.app import reference
from operators.app.cli import build_parser
from operators.app.config import PipelineConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

#: Languages a fenced block may have: ``text`` is output or a diagram, ``mermaid`` a diagram the
#: site draws, everything else runs.
LANGUAGES = {"python", "toml", "bash", "json", "text", "mermaid"}
#: Programs a ``bash`` block may call besides ``hdfs-region`` (installs and other tools' setup,
#: which CI's own steps run for real).
OTHER_PROGRAMS = {
    "python3",
    "python",
    "pip",
    "apt-get",
    "export",
    "mkdocs",
    "spark-submit",
    "$SPARK_HOME/sbin/start-connect-server.sh",
    "bash",
    "kinit",
    "cd",
    "d=$(mktemp",
    # the quickstart's background sandbox, its wait and its kill -9 (docs/quickstart-hdfs.md)
    "tail",
    "grep",
    "sleep",
    "kill",
    "[",
}
#: Shell words that start a simple command without being its program (``until X; do Y; done``).
SHELL_KEYWORDS = {"until", "while", "do", "done", "then", "fi", "if"}


def _blocks() -> list[tuple[str, int, str, str]]:
    """(page, line, language, code) of every fenced block."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        start = None
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                if start is None:
                    start, language = number, line[3:].strip()
                else:
                    code = "\n".join(lines[start : number - 1]) + "\n"
                    found.append((str(page.relative_to(ROOT)), start, language, code))
                    start = None
    return found


BLOCKS = _blocks()


def _ids(kind: str) -> list[tuple[str, int, str]]:
    return [(p, n, c) for p, n, lang, c in BLOCKS if lang == kind]


def test_every_block_says_what_it_is() -> None:
    bad = [f"{p}:{n} ```{lang}" for p, n, lang, _ in BLOCKS if lang not in LANGUAGES]
    assert not bad, f"code blocks without a known language ({sorted(LANGUAGES)}): {bad}"
    assert len(BLOCKS) > 20


@pytest.mark.parametrize(("page", "line", "code"), _ids("toml"), ids=lambda v: str(v)[:40])
def test_toml_blocks_are_valid_settings(
    page: str, line: int, code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = tomllib.loads(_local_paths(code, tmp_path))
    for key in ("ca_bundle", "keytab"):  # files the settings read when validated
        for value in re.findall(rf'^{key} = "([^"]+)"', _local_paths(code, tmp_path), re.M):
            Path(value).parent.mkdir(parents=True, exist_ok=True)
            Path(value).write_text("-----BEGIN CERTIFICATE-----\n")
    for variable in re.findall(r'_env = "(\w+)"', code):  # secrets by reference: a file
        (tmp_path / variable).write_text("secret")
        monkeypatch.setenv(variable, str(tmp_path / variable))
    models = {table.strip("[]"): model for table, model in reference.TABLES[1:]}
    if "sink" in data:
        PipelineConfig.model_validate(data)
        return
    assert data, f"{page}:{line}: an empty TOML block"
    for key, value in data.items():
        if key in models and isinstance(value, dict):
            models[key].model_validate(value)
        else:
            assert key in PipelineConfig.model_fields, f"{page}:{line}: unknown key {key!r}"


@pytest.mark.parametrize(("page", "line", "code"), _ids("json"), ids=lambda v: str(v)[:40])
def test_json_blocks_parse(page: str, line: int, code: str) -> None:
    json.loads(code)


def _commands(code: str) -> list[list[str]]:
    """Each simple command of a shell block, as its words."""
    commands: list[list[str]] = []
    for line in code.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s\d?>>?&?\s*[^\s&|;]+", " ", line)  # redirections: > f, 2>&1
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in lexer:
            if token in {";", "&&", "||", "|", "&"}:
                commands.append(words)
                words = []
            elif words or token not in SHELL_KEYWORDS:
                words.append(token)
        commands.append(words)
    return [c for c in commands if c]


@pytest.mark.parametrize(("page", "line", "code"), _ids("bash"), ids=lambda v: str(v)[:40])
def test_bash_blocks_call_real_commands(page: str, line: int, code: str) -> None:
    parser = build_parser()
    for words in _commands(code):
        program = words[0]
        if program.endswith("hdfs-region"):
            args = [w for w in words[1:]]
            if "[" in " ".join(args) or "|" in " ".join(args):
                continue  # a synopsis with optional parts
            try:
                parser.parse_args(args)
            except SystemExit as exc:
                pytest.fail(f"{page}:{line}: `{shlex.join(words)}` is refused ({exc.code})")
        elif program.startswith(".venv/bin/") or re.match(r"\w+=", program):
            continue  # a tool of the virtual environment, or a variable assignment
        else:
            assert program in OTHER_PROGRAMS, (
                f"{page}:{line}: `{program}` is neither hdfs-region nor a known tool"
            )


def _local_paths(code: str, base: Path) -> str:
    """The block with its absolute example paths (``"/landing/orders"``) moved under ``base``."""
    return re.sub(r'(["\'])/(?=[a-z])', lambda m: f"{m.group(1)}{base}/", code)


def _python_blocks() -> list[tuple[str, int, str]]:
    """Python blocks; the testing toolkit's example is left to tests/testing/
    test_readme_example.py, which runs it as tests and checks it is on its page verbatim."""
    return [block for block in _ids("python") if "def test_" not in block[2]]


def test_only_the_testing_example_is_run_elsewhere() -> None:
    elsewhere = [(p, n) for p, n, c in _ids("python") if "def test_" in c]
    assert [p for p, _ in elsewhere] == ["docs/testing.md"], elsewhere


@pytest.mark.integration
@pytest.mark.parametrize(("page", "line", "code"), _python_blocks(), ids=lambda v: str(v)[:40])
def test_python_blocks_run(page: str, line: int, code: str, tmp_path: Path) -> None:
    """Each block runs in a fresh interpreter. Absolute example paths go under a temporary
    folder whose landing directories hold a file; a block that names a cluster of the reader's
    (``nn:8020``, ``sc://spark-host``, the quickstart's sandbox in ``$HDFS``) or a toolkit fixture
    is compiled and its imports checked instead, because no such cluster is here."""
    if re.search(r"://nn[:/]|sc://spark-host|spark://master|workdir|environ\[\"HDFS\"\]", code):
        compile(code, f"{page}:{line}", "exec")
        for module, names in re.findall(r"^from ([\w.]+) import ([\w, ]+)$", code, re.M):
            loaded = importlib.import_module(module)
            for name in names.split(","):
                assert hasattr(loaded, name.strip()), f"{page}:{line}: {module}.{name}"
        return
    for landing in re.findall(r'"/(landing[\w/]*)"', code):
        (tmp_path / landing).mkdir(parents=True, exist_ok=True)
        (tmp_path / landing / "a.csv").write_text("1,one\n2,two\n")
    script = _local_paths(code, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, f"{page}:{line}:\n{done.stderr[-3000:]}"
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "curated" in p.parts]
    if "hdfs_sink" in code:
        published = "".join(p.read_text() for p in written if not p.name.startswith((".", "_")))
        assert "1,one" in published.lower() or "1,ONE" in published, f"{page}:{line}: no output"


def test_configuration_reference_is_generated_from_the_models() -> None:
    page = DOCS / "reference" / "configuration.md"
    assert page.read_text(encoding="utf-8") == reference.markdown(), (
        "docs/reference/configuration.md differs from the settings models: run "
        "`python -m operators.app.reference --write docs/reference/configuration.md`"
    )


def test_every_setting_says_what_it_means() -> None:
    missing = [
        f"{table} {row.split('|')[1].strip()}"
        for table, _ in reference.TABLES
        for row in reference.markdown().split(f"`{table}`")[-1].split("\n## ")[0].splitlines()
        if row.startswith("| `") and row.rstrip().endswith("|  |")
    ]
    assert not missing, f"settings without a `#:` comment above them: {missing}"


#: Exceptions that never leave the code that raises them (control flow, caught nearby; a
#: value that does not fit its column becomes the BadRecordError of its record).
INTERNAL = {"NotVerbatim", "FileMoved", "BadValue", "StdoutClosed"}


def _exception_classes() -> set[str]:
    names = set()
    for package in ("region", "operators"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if ".testing" in info.name or info.name.endswith("__main__"):
                continue
            try:
                module = importlib.import_module(info.name)
            except ImportError:
                continue  # an optional client (Kerberos) that is not installed
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == info.name
                    and not name.startswith("_")
                ):
                    names.add(name)
    return names


def test_troubleshooting_names_every_error_the_code_raises() -> None:
    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## `(\w+)`", page, re.M))
    missing = sorted(_exception_classes() - headings - INTERNAL)
    assert not missing, f"docs/troubleshooting.md has no section for {missing}"


def _mkdocs(key: str) -> str:
    """A top-level value of mkdocs.yml (read as text: PyYAML is in the docs extra only)."""
    found = re.search(rf"^{key}: (\S+)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert found, f"mkdocs.yml sets no {key}"
    return found.group(1)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n")[1]
    nav = re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", text, re.M)
    assert "guarantees.md" in nav
    generated = {"index.md"}  # the README, made the front page by docs/hooks.py
    missing = [page for page in nav if page not in generated and not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml nav names pages docs/ lacks: {missing}"
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not pages - set(nav), f"pages the nav does not reach: {sorted(pages - set(nav))}"


def test_the_site_and_the_package_name_the_same_addresses() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert _mkdocs("site_url") == urls["Documentation"]
    assert _mkdocs("repo_url") == urls["Repository"]


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_site_shows_the_release_it_documents() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    hooks = _hooks()
    config = {"config_file_path": str(ROOT / "mkdocs.yml"), "site_name": "hdfs-region"}
    config = hooks.on_config({**config, "extra": {}, "copyright": None})
    assert config["site_name"] == f"hdfs-region {version}"
    assert config["extra"]["release"] == version
    assert version in config["copyright"]


def test_warnings_are_admonitions() -> None:
    """A warning or note written as a paragraph ("**Warning**:", "Note:") is easy to skim past:
    the site draws ``!!! warning`` / ``!!! note`` blocks as boxes."""
    bad = []
    for page in PAGES:
        prose = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for line in prose.splitlines():
            if re.match(r"\s*(\*\*|_)?(Warning|Note|Caution|Important)\b\W*(\*\*|_)?:", line):
                bad.append(f"{page.relative_to(ROOT)}: {line.strip()[:60]}")
    assert not bad, f"use an admonition (!!! warning / !!! note) for: {bad}"


def test_api_pages_show_referenced_names_without_their_rest_role() -> None:
    html = "<p>See :class:<code>HDFS2FileSink</code> and :meth:<code>reset</code>.</p>"
    api = SimpleNamespace(file=SimpleNamespace(src_uri="api/operators.md"))
    guide = SimpleNamespace(file=SimpleNamespace(src_uri="operators.md"))
    hooks = _hooks()
    shown = hooks.on_page_content(html, page=api, config={}, files=[])
    assert shown == "<p>See <code>HDFS2FileSink</code> and <code>reset</code>.</p>"
    assert hooks.on_page_content(html, page=guide, config={}, files=[]) == html


@pytest.mark.parametrize(
    "page", ["README.md", "docs/getting-started.md", "docs/troubleshooting.md"]
)
def test_exit_code_tables_are_the_generated_one(page: str) -> None:
    from operators.app.exit_codes import DOC_MARK, markdown_table

    text = (ROOT / page).read_text(encoding="utf-8")
    assert text.count(DOC_MARK) == 1, f"{page} shows the exit codes once, under their mark"
    start = text.index(DOC_MARK)
    table = markdown_table()
    assert text[start : start + len(table)] == table, (
        f"{page}'s exit code table differs from operators/app/exit_codes.py's: replace it with "
        "the output of `python -m operators.app.exit_codes`"
    )


def _written_paths(config: PipelineConfig) -> list[str]:
    sink = config.sink.template or config.sink.directory or ""
    return [config.scan_directory, os.path.dirname(sink), config.region.checkpoint_dir]


def test_what_the_examples_write_into_the_checkout_is_ignored_by_git() -> None:
    """The example settings (conf/) and the documentation's commands must not leave files the
    checkout would show as new (``git status``)."""
    from operators.app.config import load_pipeline

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    inside: set[str] = set()
    for path in sorted((ROOT / "conf").glob("*.toml")):
        try:
            config = load_pipeline(path)
        except ValueError:
            continue  # a fragment (conf/region.toml), not a pipeline
        for written in _written_paths(config):
            local = written.removeprefix("file://")
            if os.path.isabs(local) and Path(local).is_relative_to(ROOT):
                inside.add(os.path.relpath(local, ROOT))
    assert inside, "the examples write nothing into the checkout: this test tests nothing"
    for relative in sorted(inside):
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", "--no-index", relative + "/x"], cwd=ROOT, check=False
        )
        assert ignored.returncode == 0, f"conf/ examples write {relative}/, not ignored by git"
    page = (DOCS / "monitoring.md").read_text(encoding="utf-8")
    assert "hdfs-region run conf/" not in page.split("## Metrics")[0]
