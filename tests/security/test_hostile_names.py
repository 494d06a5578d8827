"""Hostile file names from data (file_attribute_name), from templates and from the scan's control
input: never a write outside the base directory, never a crash of the region, and every bad
record accounted for (skipped with a log line, rejected into an exactly-once rejects file, or a
failure when asked)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.common.errors import BadRecordError
from operators.common.safepath import confine
from operators.fs import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.sink.manifest import Published, manifest_dir, read_manifests, write_manifest
from region.errors import ConfigError
from tests.landing import SinkEnv, SinkRun, published_bytes

from .conftest import files_under

REJECTS = "_rejects/rejects-%FILENUM.jsonl"

# (name, a fragment of the reason every message must give)
HOSTILE = [
    ("", "is empty"),
    ("/etc/passwd", "is absolute"),
    ("../escape", "'..'"),
    ("a/../../escape", "'..'"),
    ("./a", "'.'"),
    ("a//b", "empty component"),
    ("dir/", "names a directory"),
    (".hidden", "hidden"),
    ("a\x00b", "control character"),
    ("a\rb", "control character"),
    ("a\x85b", "control character"),  # NEXT LINE (C1)
    ("a\u202eb", "invisible character"),  # RIGHT-TO-LEFT OVERRIDE
    ("a\u200bb", "invisible character"),  # ZERO WIDTH SPACE
    ("a\u2028b", "invisible character"),  # LINE SEPARATOR
    ("..\u2215escape", "looks like a separator"),  # DIVISION SLASH
    ("..\u2044escape", "looks like a separator"),  # FRACTION SLASH
    ("..\\escape", "looks like a separator"),
    ("\uff0e\uff0e/escape", "NFKC"),  # FULLWIDTH FULL STOP
    ("\u2024\u2024/escape", "NFKC"),  # ONE DOT LEADER
    ("\u2025/escape", "NFKC"),  # TWO DOT LEADER
    ("..\uff0fescape", "NFKC"),  # FULLWIDTH SOLIDUS
    ("a\u00a0b", "NFKC"),  # NO-BREAK SPACE
    ("x" * 256, "more than"),
    ("\u00e9" * 128, "256 bytes"),  # 128 characters, 256 bytes
    ("d/" * 2100 + "f", "bytes long"),
    (7, "not a string"),
    (None, "not a string"),
    # Names plain readers skip, and the sink's own folder (manifests, owner record).
    ("_hidden.csv", "starting with '_'"),
    ("day/_tmp/a.csv", "starting with '_'"),
    ("_hdfs_sink/published/00000000000000000001.json", "starting with '_'"),
    ("_hdfs_sink/owner.json", "starting with '_'"),
]
IDS = [repr(name)[:24] for name, _ in HOSTILE]


def attr(env: SinkEnv, **kw: Any) -> dict[str, Any]:
    return {"file_attribute_name": "name", "directory": env.out, **kw}


def outside_base(env: SinkEnv) -> list[str]:
    """Files below the test's root directory that are not inside the sink's base."""
    root = Path(env.root)
    return [f for f in files_under(root) if not (root / f).is_relative_to(env.out)]


@pytest.mark.parametrize(("name", "reason"), HOSTILE, ids=IDS)
def test_a_hostile_name_is_skipped_with_an_error_naming_it_and_nothing_leaves_the_base(
    sink_local: SinkEnv, caplog: pytest.LogCaptureFixture, name: Any, reason: str
) -> None:
    run = SinkRun(sink_local, attr(sink_local))
    with caplog.at_level(logging.WARNING, logger="operators.sink"):
        run.write([("ok", "1"), (name, "2"), ("ok", "3")])
    run.stop()
    assert sink_local.published() == {"ok": b"1\n3\n"}
    assert outside_base(sink_local) == []
    assert run.sink.metrics.bad_records == 1
    # Skipped without being asked to: an ERROR, naming the record, its value and why.
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert "skipped record 1" in message and reason in message
    assert repr(name)[:40] in message
    assert "\n" not in message and "\r" not in message  # a name cannot forge log lines


@pytest.mark.parametrize(("name", "reason"), HOSTILE[:12], ids=IDS[:12])
def test_fail_mode_raises_before_writing_anything_outside(
    sink_local: SinkEnv, name: Any, reason: str
) -> None:
    run = SinkRun(sink_local, attr(sink_local, on_bad_record="fail"))
    with pytest.raises(BadRecordError, match=reason) as info:
        run.write([(name, "1")])
    assert info.value.offset == 0 and info.value.field == "name"
    assert files_under(Path(sink_local.root)) == []


def test_rejected_records_are_kept_exactly_once_across_a_crash(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, attr(sink_env, rejects_file=REJECTS))
    run.write([("a", "1"), ("../x", "2")])
    run.cut()
    run.write([("b", "3"), ("/abs", "4"), ("_rejects/rejects-9.jsonl", "5")])
    run.crash()  # the records after the cut are replayed
    run.write([("b", "3"), ("/abs", "4"), ("_rejects/rejects-9.jsonl", "5")])
    run.stop()
    assert sink_env.published() == {"a": b"1\n", "b": b"3\n"}
    rejects = [
        json.loads(line)
        for line in published_bytes(sink_env, sink_env.path("_rejects")).decode().splitlines()
    ]
    assert [r["record"] for r in rejects] == [
        ["../x", "2"],
        ["/abs", "4"],
        ["_rejects/rejects-9.jsonl", "5"],
    ]
    assert "'..'" in rejects[0]["reason"] and "is absolute" in rejects[1]["reason"]
    assert "starting with '_'" in rejects[2]["reason"]
    assert {r["sink"] for r in rejects} == {"sink"}
    assert run.sink.metrics.records_rejected == 2  # this sink object: the replayed two
    assert not [n for n in sink_env.names(sink_env.path("_rejects")) if n.startswith(".")]


def test_records_that_cannot_be_encoded_are_rejected_and_the_rest_written(
    sink_local: SinkEnv,
) -> None:
    settings = {
        "file": sink_local.path("part-%FILENUM.txt"),
        "encoding": "ascii",
        "tuples_per_file": 2,
        "rejects_file": REJECTS,
    }
    run = SinkRun(sink_local, settings)
    run.write(["a", 42, "b", "caf\u00e9", "c", b"bytes", "d"])
    run.stop()
    assert published_bytes(sink_local) == b"a\nb\nc\nd\n"
    rejects = published_bytes(sink_local, sink_local.path("_rejects")).decode().splitlines()
    assert [json.loads(line)["index"] for line in rejects] == [1, 3, 5]
    assert "line mode needs str" in json.loads(rejects[0])["reason"]
    assert "cannot be encoded as ascii" in json.loads(rejects[1])["reason"]


def test_a_name_written_before_goes_to_a_numbered_file_and_nothing_is_overwritten(
    sink_local: SinkEnv, caplog: pytest.LogCaptureFixture
) -> None:
    run = SinkRun(sink_local, attr(sink_local, on_bad_record="skip", max_open_files=1))
    run.write([("a", "1"), ("b", "2")])
    with caplog.at_level(logging.INFO, logger="operators.sink"):
        run.write([("a", "3"), ("c", "4")])
    run.stop()
    assert sink_local.published() == {"a": b"1\n", "b": b"2\n", "a-1": b"3\n", "c": b"4\n"}
    assert run.sink.metrics.bad_records == 0
    assert any("its new records go to" in r.getMessage() for r in caplog.records)


def test_the_longest_name_that_fits_its_in_progress_name_is_written(sink_local: SinkEnv) -> None:
    # ".<name>~sink.inprogress" must fit in 255 bytes: 238 bytes of name for a sink "sink".
    fits, too_long = "y" * 238, "y" * 239
    run = SinkRun(sink_local, attr(sink_local, on_bad_record="skip"))
    run.write([(fits, "1"), (too_long, "2")])
    run.stop()
    assert sink_local.published() == {fits: b"1\n"}
    assert run.sink.metrics.bad_records == 1


def test_a_record_cannot_write_into_the_sinks_own_folder_nor_forge_a_manifest(
    sink_local: SinkEnv,
) -> None:
    published = "_hdfs_sink/published/"
    forged = json.dumps([{"path": "/etc/shadow", "size": 1, "cut": 9}])
    run = SinkRun(sink_local, attr(sink_local, manifest=True, rejects_file=REJECTS))
    run.write([("a.csv", "1"), (published + "00000000000000000001.json", "lost?")])
    run.cut()
    run.write([("b.csv", "2"), (published + "00000000000000000009.json", forged)])
    run.stop()
    # Both records are in the rejects, naming the record and the value; nothing else moved.
    rejects = [
        json.loads(line)
        for line in published_bytes(sink_local, sink_local.path("_rejects")).decode().splitlines()
    ]
    assert [(r["index"], r["record"]) for r in rejects] == [
        (1, [published + "00000000000000000001.json", "lost?"]),
        (1, [published + "00000000000000000009.json", forged]),
    ]
    assert all("starting with '_'" in r["reason"] for r in rejects)
    assert sink_local.published() == {"a.csv": b"1\n", "b.csv": b"2\n"}
    # The manifests are the sink's own and name exactly the published files.
    listed = read_manifests(sink_local.fs, manifest_dir(sink_local.out))
    assert [f.path for _, files in listed for f in files] == [
        sink_local.path("a.csv"),
        sink_local.path("b.csv"),
    ]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/etc/shadow", "outside"),
        ("{out}/../elsewhere.txt", "outside"),
        ("{out}/_hdfs_sink/owner.json", "the sink's own folder"),
        (7, "not a path"),
    ],
)
def test_read_manifests_refuses_a_manifest_naming_a_file_outside_the_output(
    sink_local: SinkEnv, path: Any, problem: str
) -> None:
    directory = manifest_dir(sink_local.out)
    write_manifest(sink_local.fs, directory, 1, [Published(sink_local.path("a.csv"), 2, 1)])
    name = write_manifest(
        sink_local.fs,
        directory,
        2,
        [Published(path.format(out=sink_local.out) if isinstance(path, str) else path, 1, 2)],
    )
    assert name is not None
    with pytest.raises(ValueError, match=problem) as info:
        read_manifests(sink_local.fs, directory)
    assert "00000000000000000002.json" in str(info.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"directory": "out", "file": "../x-%FILENUM"}, "no '..'"),
        ({"directory": "out", "file": "/abs-%FILENUM"}, "must be relative"),
        ({"file": "out/x", "rejects_file": "../r-%FILENUM"}, "'..'"),
        ({"file": "out/x", "rejects_file": "/r-%FILENUM"}, "is absolute"),
        ({"file": "out/x", "rejects_file": "r.jsonl"}, "needs %FILENUM"),
        ({"file": "out/x", "on_bad_record": "reject"}, "needs rejects_file"),
        ({"file": "out/x", "on_bad_record": "skip", "rejects_file": "r%FILENUM"}, "never"),
        ({"file": "out/_hdfs_sink/published/%FILENUM.json"}, "the sink's own folder"),
        ({"file": "out/x", "rejects_file": "_hdfs_sink/r-%FILENUM"}, "the sink's own folder"),
    ],
)
def test_settings_refuse_templates_that_leave_the_base(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        SinkSettings(**settings)


@pytest.mark.parametrize(
    ("file", "kw", "problem"),
    [
        ("%TIME/x-%FILENUM", {"time_format": "'..'"}, "is outside"),
        ("%TIME/x-%FILENUM", {"time_format": "yyyy'\u2215'MM"}, "looks like a separator"),
        ("%TIME-x-%FILENUM", {"time_format": "'\uff0e\uff0e'"}, "NFKC"),
        ("a\x00b-%FILENUM", {}, "control character"),
        ("a\u202e-%FILENUM", {}, "invisible character"),
        ("p%PEID/x-%FILENUM", {"peid": "/../../../../etc"}, "is outside"),
        ("p%PEID-%FILENUM", {"peid": "x" * 300}, "more than"),
    ],
)
def test_templates_whose_names_leave_the_base_or_are_hostile_fail_at_start(
    sink_local: SinkEnv, file: str, kw: dict[str, Any], problem: str
) -> None:
    peid = kw.pop("peid", "0")
    settings = SinkSettings(file=sink_local.path(file), **kw)
    with pytest.raises(ConfigError, match=problem):
        HDFS2FileSink(settings, sink_local.fs, peid=peid)
    root = Path(sink_local.root)
    assert not root.exists() or files_under(root) == []


# -- property: whatever the name, nothing lands outside the base -----------------------------

_ALPHABET = st.sampled_from(
    [".", "..", "/", "\\", "a", "\u00e9", "\x00", "\n", "\u2215", "\uff0e", "\u2024", "\u202e", "~"]
)
_NAMES = st.lists(_ALPHABET, max_size=8).map("".join)


@given(name=_NAMES)
def test_confine_never_returns_a_path_outside_the_base(name: str) -> None:
    try:
        path = confine("/base/out", name)
    except ValueError:
        return
    assert path.startswith("/base/out/") and ".." not in path.split("/")


@given(names=st.lists(_NAMES, min_size=1, max_size=6))
@example(names=["a", "a/b"])  # a file being written where a directory is needed
@example(names=["a/b", "a"])  # the reverse
@example(names=["a", "b", "a"])  # a name written before
@example(names=["a", "..", "\uff0e\uff0e/a", "\u2215", "a"])
def test_every_record_is_written_inside_the_base_or_rejected_whatever_the_names(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    env = SinkEnv(LocalFileSystem(), str(tmp_path_factory.mktemp("prop")))
    run = SinkRun(env, attr(env, rejects_file=REJECTS))
    run.write([(name, str(i)) for i, name in enumerate(names)])
    run.stop()
    assert outside_base(env) == []
    written, rejects = _lines_below(Path(env.out))
    # Each record once: in the file it names, or (a hostile or clashing name) in the rejects.
    assert sorted(written + [json.loads(r)["index"] for r in rejects]) == list(range(len(names)))
    assert len(rejects) == run.sink.metrics.records_rejected == run.sink.metrics.bad_records


def _lines_below(base: Path) -> tuple[list[int], list[str]]:
    """The record numbers in the published data files and the lines of the rejects files."""
    written: list[int] = []
    rejects: list[str] = []
    for path in base.rglob("*") if base.exists() else []:
        rel = path.relative_to(base)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue  # directories, and in-progress files (none should be left)
        lines = path.read_text().splitlines()
        if rel.parts[0] == "_rejects":
            rejects += lines
        else:
            written += [int(line) for line in lines]
    return written, rejects


# -- the scan's control input ----------------------------------------------------------------


def _scan(tmp_path: Path) -> tuple[HDFS2DirectoryScan, Path]:
    roots = tmp_path / "roots"
    (roots / "landing" / "day1").mkdir(parents=True)
    (roots / "landing" / "day1" / "f.txt").write_text("x\n")
    settings = ScanSettings(directory=str(roots / "landing"), roots=(str(roots),), sleep_time=0)
    scan = HDFS2DirectoryScan(settings, LocalFileSystem())
    scan.reset_to_initial_state()
    return scan, roots


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("{roots}/../etc", "outside the allowed roots"),
        ("{roots}/landing/../../etc", "outside the allowed roots"),
        ("/etc", "outside the allowed roots"),
        ("roots/landing", "outside the allowed roots"),  # relative: not below absolute roots
        ("{roots}/link-out", "symbolic link"),
        ("{roots}/landing/a\x00b", "control character"),
        ("{roots}/landing/\uff0e\uff0e", "NFKC"),
        ("{roots}/landing\u2215..", "looks like a separator"),
        ("{roots}/" + "x" * 300, "more than"),
    ],
)
def test_the_control_input_refuses_directories_outside_the_roots(
    tmp_path: Path, target: str, reason: str
) -> None:
    scan, roots = _scan(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("no\n")
    (roots / "link-out").symlink_to(outside)
    before = scan.directory
    with pytest.raises(BadRecordError, match=reason) as info:
        scan.set_directory(target.format(roots=roots))
    assert isinstance(info.value, ValueError) and info.value.field == "directory"
    assert scan.directory == before  # nothing changed
    assert scan.next_batch(10) is None  # landing holds no file at its top


def test_the_control_input_accepts_a_directory_inside_the_roots_even_through_a_link(
    tmp_path: Path,
) -> None:
    scan, roots = _scan(tmp_path)
    (roots / "link-in").symlink_to(roots / "landing" / "day1")
    scan.set_directory(str(roots / "link-in"))
    batch = scan.next_batch(10)
    assert batch is not None and [Path(p).name for p in batch.records] == ["f.txt"]
