"""The rejects file keeps the record itself as JSON (not its Python spelling), and the run's
summary counts rejected records apart from those written out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.sink.records import as_json
from tests.cli.conftest import PipelineDir, cli

ASCII_SINK = """\
    engine = "local"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    encoding = "ascii"
    rejects_file = "rejects/r-%FILENUM.jsonl"
"""


def test_a_rejected_line_is_kept_as_its_text_and_counted_apart(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["plain line", "café line", "other line"])
    config = pdir.write_config(ASCII_SINK)
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    rejects = [
        json.loads(line)
        for path in sorted((pdir.out / "rejects").glob("r-*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert [r["record"] for r in rejects] == ["café line"]
    assert pdir.output_lines() == ["plain line", "other line"]
    assert "stopped: 3 records in, 2 out, 1 rejected (in the rejects file)," in done.stdout


@pytest.mark.parametrize(
    ("record", "kept"),
    [
        ("café line", "café line"),
        (b"caf\xc3\xa9", "café"),
        (b"\xff\x00a", "\\xff\x00a"),
        ({"id": 2.5, "tags": ("a", b"b")}, {"id": 2.5, "tags": ["a", "b"]}),
        (("name.csv", 3), ["name.csv", 3]),
        (float("nan"), "nan"),
        (None, None),
    ],
)
def test_a_record_as_the_rejects_file_keeps_it(record: Any, kept: Any) -> None:
    assert as_json(record) == kept
    assert json.loads(json.dumps(as_json(record), allow_nan=False)) == kept
