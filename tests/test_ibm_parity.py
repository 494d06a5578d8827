"""The IBM parity registry (``operators/app/ibm.py``) says only what the code does: every row that
claims an IBM parameter is accepted by our settings model under the IBM name and ours, every
port and metric it names exists (the metrics count what IBM's count in a real run), no row
says "unsupported" of a name the code accepts, and the docs' tables are the registry's."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices, BaseModel, SecretStr

from operators.app import ibm
from operators.app.ibm import GROUPS, Group, Kind, Row, Status
from operators.copy import CopySettings, HDFS2FileCopy
from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

DOCS = Path(__file__).resolve().parent.parent / "docs"
MIGRATION = DOCS / "ibm-migration.md"
OPERATORS = DOCS / "operators.md"

ALL = [(g, r) for g in GROUPS for r in g.rows]


def row_id(pair: tuple[Group, Row]) -> str:
    group, row = pair
    return f"{group.ibm.split()[0]}.{row.ibm.split()[0].strip('`')}"


def rows(*kinds: Kind, claimed: bool) -> list[Any]:
    """The rows of ``kinds`` that claim support (supported / different) or do not."""
    picked = [
        (g, r)
        for g, r in ALL
        if r.kind in kinds and (r.status is not Status.UNSUPPORTED) == claimed
    ]
    return [pytest.param(g, r, id=row_id((g, r))) for g, r in picked]


def load(dotted: str) -> Any:
    """``module:Name``; a missing module is an ImportError (a failure for a row claiming it)."""
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def accepted_names(model: type[BaseModel]) -> set[str]:
    """Every key ``model`` takes: its fields' names and aliases."""
    names = set(model.model_fields)
    for info in model.model_fields.values():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(c for c in alias.choices if isinstance(c, str))
        elif isinstance(alias, str):
            names.add(alias)
    return names


def plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return value


def check_parameter(group: Group, row: Row) -> None:
    """The model takes ``row.example`` under the IBM name and under ours, into field ``ours``."""
    assert row.ours is not None, f"{row.ibm}: a {row.status} parameter names ours"
    assert row.example is not None, f"{row.ibm}: give the row an example value"
    model = load(group.settings)
    assert row.ours in model.model_fields, f"{group.settings} has no field {row.ours!r}"
    default = model.model_fields[row.lands_in or row.ours].get_default(call_default_factory=True)
    want = row.expect if row.expect is not None else row.example
    assert plain(default) != want, f"{row.ibm}: the example {want!r} is the default"
    for key in dict.fromkeys((row.ibm, row.ours)):
        data = {**group.base, **row.context, key: row.example}
        settings = model.model_validate({k: v for k, v in data.items() if v is not None})
        field = row.lands_in or row.ours
        got = plain(getattr(settings, field))
        assert got == want, f"{group.settings}: {key}={row.example!r} gave {field}={got!r}"


@pytest.mark.parametrize(("group", "row"), rows(Kind.PARAMETER, claimed=True))
def test_a_claimed_parameter_is_taken_under_the_ibm_name_and_ours(group: Group, row: Row) -> None:
    check_parameter(group, row)


def check_not_accepted(group: Group, row: Row) -> None:
    """A name the code took up meanwhile must be flipped to supported (and so checked)."""
    try:
        model = load(group.settings)
    except ImportError:
        return  # not written yet: nothing accepts the name
    assert row.ibm not in accepted_names(model), (
        f"{group.settings} accepts {row.ibm!r}: the registry row says unsupported "
        f"({row.note}); make it supported or different, with an example"
    )


@pytest.mark.parametrize(("group", "row"), rows(Kind.PARAMETER, claimed=False))
def test_an_unsupported_parameter_is_not_accepted_yet(group: Group, row: Row) -> None:
    check_not_accepted(group, row)


@pytest.mark.parametrize(("group", "row"), rows(Kind.INPUT, Kind.OUTPUT, claimed=True))
def test_a_claimed_port_names_an_api_of_ours(group: Group, row: Row) -> None:
    assert group.operator is not None and row.ours is not None
    operator = load(group.operator)
    keywords = inspect.signature(operator.__init__).parameters
    fields = load(group.settings).model_fields
    assert hasattr(operator, row.ours) or row.ours in keywords or row.ours in fields, (
        f"{group.operator} has no method, keyword or setting {row.ours!r} for {row.ibm}"
    )


def test_the_checks_fail_on_claims_the_code_does_not_have() -> None:
    scan = ibm.SCAN
    for bogus in (
        ibm.supported("sleepTme", "sleep_time", 2.5),  # a misspelt alias
        ibm.supported("sleepTime", "sleep_tim", 2.5),  # no such field
        ibm.supported("sleepTime", "init_delay", 2.5),  # the alias feeds another field
        ibm.supported("sleepTime", "sleep_time", 5.0),  # the default proves nothing
    ):
        with pytest.raises((AssertionError, ValueError)):
            check_parameter(scan, bogus)
    missing = dataclasses.replace(ibm.COPY, settings="operators.no_such_module:CopySettings")
    with pytest.raises(ImportError):
        check_parameter(missing, ibm.supported("localFile", "local_file", "/tmp/a"))
    with pytest.raises(AssertionError, match="sleepTime"):
        check_not_accepted(scan, ibm.unsupported("sleepTime", "stale"))
    check_not_accepted(missing, ibm.unsupported("localFile", ibm.IN_PROGRESS))


def test_metrics_count_what_ibm_counts(tmp_path: Path) -> None:
    """IBM's metrics count files (scanned, opened, written, copied): a run over three files with
    one output file per input file reads 3 in each of ours."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for i in range(3):
        path = landing / f"f{i}.txt"
        path.write_text(f"a{i}\nb{i}\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    fs = LocalFileSystem()
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(landing), sleep_time=0), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    sink = HDFS2FileSink(
        SinkSettings(file=str(tmp_path / "out" / "part-%FILENUM.txt"), close_on_punct=True), fs
    )
    runner = PipelineRunner(
        Pipeline(source, sinks=[sink]),
        RegionSettings(period=3600),
        CheckpointStore(fs, str(tmp_path / "ck")),
    )
    runner.run(available_now=True)
    published = [n for n in os.listdir(tmp_path / "out") if not n.startswith(("_", "."))]
    assert len(published) == 3
    copier = HDFS2FileCopy(
        CopySettings(
            direction="copyFromLocalFile", local_file_attr_name="src", hdfs_file_attr_name="dst"
        ),
        fs,
    )
    for name in published:
        copier.process(
            {"src": str(tmp_path / "out" / name), "dst": str(tmp_path / "copies" / name)}
        )
    running: dict[str, Any] = {
        "HDFS2DirectoryScan": scan,
        "HDFS2FileSource": source,
        "HDFS2FileSink": sink,
        "HDFS2FileCopy": copier,
    }
    claimed = [
        (g, r) for g, r in ALL if r.kind is Kind.METRIC and r.status is not Status.UNSUPPORTED
    ]
    assert claimed, "the registry claims no metric"
    for group, row in claimed:
        assert group.ibm in running, f"{row.ibm}: no run of {group.ibm} here: add one"
        assert row.ours is not None
        metrics = running[group.ibm].metrics
        values = metrics() if callable(metrics) else dataclasses.asdict(metrics)
        assert values.get(row.ours) == 3, f"{group.ibm} {row.ibm} -> {row.ours}: {values}"


def test_the_readme_tables_are_the_registry() -> None:
    text = MIGRATION.read_text(encoding="utf-8")
    assert "## IBM parameters" in text
    assert ibm.section_of(text) == ibm.markdown(), (
        "docs/ibm-migration.md's IBM tables differ from operators/app/ibm.py: run "
        "`python -m operators.app.ibm --write docs/ibm-migration.md`"
    )


def test_write_replaces_only_the_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{ibm.BEGIN}\nold\n{ibm.END}\n\nafter\n", encoding="utf-8")
    assert ibm.main(["--write", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# x\n\n") and text.endswith(f"{ibm.END}\n\nafter\n")
    assert ibm.section_of(text) == ibm.markdown()
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n", encoding="utf-8")
    assert ibm.main(["--write", str(bare)]) == 2
    assert bare.read_text(encoding="utf-8") == "no markers\n"


def test_json_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert ibm.main(["--json"]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert dumped["toolkit"] == ibm.TOOLKIT
    assert len(dumped["rows"]) == len(ALL)
    first = dumped["rows"][0]
    assert (first["ibm"], first["ours"], first["status"]) == ("hdfsUri", "uri", "supported")


def test_every_row_is_complete_and_named_once() -> None:
    for group in GROUPS:
        names = [r.ibm for r in group.rows]
        assert len(names) == len(set(names)), f"{group.ibm}: a name listed twice"
        for row in group.rows:
            if row.status is not Status.SUPPORTED:
                assert row.note, f"{group.ibm} {row.ibm}: a {row.status} row says why"
            if row.status is Status.UNSUPPORTED:
                assert row.ours is None, f"{group.ibm} {row.ibm}: unsupported yet names ours"
            elif row.kind is Kind.PARAMETER:
                assert row.ours is not None and re.fullmatch(r"[a-z][a-z0-9_]*", row.ours)
            assert "|" not in row.note, f"{row.ibm}: a '|' breaks the docs table"
    assert {g.ibm for g in ibm.OPERATORS} == {
        "HDFS2DirectoryScan",
        "HDFS2FileSource",
        "HDFS2FileSink",
        "HDFS2FileCopy",
    }
    # Each operator has the shared parameters too.
    sink = [r.ibm for _, r in ibm.rows_of("HDFS2FileSink")]
    assert "tuplesPerFile" in sink and "hdfsUri" in sink
    with pytest.raises(KeyError, match="HDFS2FileSinc"):
        list(ibm.rows_of("HDFS2FileSinc"))


def test_the_operator_tables_name_the_ibm_names_the_registry_claims() -> None:
    """The hand-written parameter tables of "The operators" pair each of ours with the IBM name
    the registry pairs it with."""
    text = OPERATORS.read_text(encoding="utf-8")
    for group in (ibm.SCAN, ibm.SOURCE, ibm.SINK):
        heading = f"### {group.ibm} (`{group.table}`)\n"
        assert heading in text, f"docs/operators.md has no section {heading.strip()!r}"
        table = text.split(heading, 1)[1].strip().split("\n\n", 1)[0]
        claimed = {(r.ibm, r.ours) for r in group.rows if r.status is not Status.UNSUPPORTED}
        pairs: list[tuple[str, str]] = []
        for line in table.splitlines()[2:]:
            ours, theirs = (cell.strip() for cell in line.split("|")[1:3])
            if theirs == "\N{EN DASH}":
                continue
            pairs += zip(re.findall(r"`(\w+)`", ours), re.findall(r"`(\w+)`", theirs), strict=True)
        assert pairs, f"no IBM names found in the {group.ibm} table"
        for ours_name, ibm_name in pairs:
            assert (ibm_name, ours_name) in claimed, (
                f"docs/operators.md's {group.ibm} table pairs {ours_name} with {ibm_name}; "
                "the registry not"
            )
