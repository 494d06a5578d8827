"""One landing directory through both engines: the same records, in order within each file.

The directory holds what landing directories hold: ties in mtime, late files (an mtime older
than files already read, some far beyond the late window), CRLF, a last line without newline,
a last line ending in CR, undecodable bytes (``on_decode_error = "replace"``), a copy in flight
(``x._COPYING_``) renamed when done, hidden names and empty files. It is read in two rounds, the
second from the checkpoints of the first, by ``hdfs-region run`` on the in-process engine and by
``hdfs_scan`` -> ``hdfs_sink`` on Spark.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli

pytestmark = pytest.mark.spark

S = 1_000_000_000
T0 = 1_700_000_000 * S

FIRST = {
    # name: (content, mtime)
    "tie-b.txt": (b"tie-b 1\ntie-b 2\n", T0),
    "tie-a.txt": (b"tie-a 1\ntie-a 2\n", T0),
    "crlf.txt": (b"crlf 1\r\ncrlf 2\r\n\r\ncrlf 4\r\n", T0 + 1 * S),
    "no-final-newline.txt": (b"nofinal 1\nnofinal 2", T0 + 2 * S),
    "undecodable.txt": (b"bad 1\nbad 2 \xff\xfe!\nbad 3 \xc3\n\xe2\x82\nbad 5\n", T0 + 3 * S),
    "empty.txt": (b"", T0 + 4 * S),
    "big._COPYING_": (b"copied 1\ncopied 2\n", T0 + 5 * S),
    ".hidden.txt": (b"hidden 1\n", T0 + 5 * S),
    "_temporary": (b"temporary 1\n", T0 + 5 * S),
    "final-cr.txt": (b"final-cr 1\r\nfinal-cr 2\r", T0 + 6 * S),
    "newlines-only.txt": (b"\n\n", T0 + 7 * S),
}
SECOND = {
    "late-10s.txt": (b"late10 1\nlate10 2\n", T0 - 3 * S),
    "late-2h.txt": (b"late2h 1\nlate2h 2\n", T0 - 7200 * S),
    "tie-c.txt": (b"tie-c 1\n", T0 + 7 * S),
    "new.txt": (b"new 1\nnew 2\nnew 3\n", T0 + 20 * S),
}

LOCAL = """\
    engine = "local"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    [source]
    on_decode_error = "replace"
    [sink]
    file = "out-local/part-%FILENUM.txt"
    tuples_per_file = 5
"""


def land(directory: Path, files: dict[str, tuple[bytes, int]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, (data, mtime) in files.items():
        (directory / name).write_bytes(data)
        os.utime(directory / name, ns=(mtime, mtime))


def second_round(landing: Path) -> None:
    land(landing, SECOND)
    copying = landing / "big._COPYING_"
    os.rename(copying, landing / "big.txt")  # done: keeps the mtime of its last write (late)


def run_spark(spark: Any, landing: Path, out: Path, ck: Path) -> None:
    query = (
        spark.readStream.format("hdfs_scan")
        .option("directory", str(landing))
        .option("plan_dir", str(ck / "plans"))
        .option("on_decode_error", "replace")
        .option("maxFilesPerTrigger", "3")
        .load()
        .writeStream.format("hdfs_sink")
        .option("file", str(out / "part-%FILENUM.txt"))
        .option("tuplesPerFile", "5")
        .option("checkpointLocation", str(ck / "spark"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None


def records(out: Path) -> list[str]:
    """The published records exactly as written: files in %FILENUM order, split on LF only (a
    CR that ends a record stays visible)."""
    names = sorted(
        (n for n in os.listdir(out) if n.startswith("part-")),
        key=lambda n: int(n[5:].split(".")[0]),
    )
    lines: list[str] = []
    for name in names:
        data = (out / name).read_bytes()
        assert data.endswith(b"\n"), name
        lines += data.decode("utf-8").split("\n")[:-1]
    return lines


def by_file(lines: list[str]) -> dict[str, list[str]]:
    """Records grouped by the input file their text names, in published order."""
    out: dict[str, list[str]] = {}
    for line in lines:
        out.setdefault(line.split(" ")[0] if " " in line else "(no name)", []).append(line)
    return out


def test_both_engines_publish_the_same_records_in_order_within_each_file(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "pipe"
    landing = root / "landing"
    land(landing, FIRST)
    config = root / "pipeline.toml"
    config.write_text(LOCAL.replace("    ", ""), encoding="utf-8")
    spark_out, spark_ck = root / "out-spark", root / "ck-spark"

    first_local = cli("run", str(config), "--available-now", "--no-progress")
    assert first_local.returncode == 0, first_local.stderr[-2000:]
    run_spark(spark, landing, spark_out, spark_ck)
    second_round(landing)
    second_local = cli("run", str(config), "--available-now", "--no-progress")
    assert second_local.returncode == 0, second_local.stderr[-2000:]
    run_spark(spark, landing, spark_out, spark_ck)

    local = records(root / "out-local")
    on_spark = records(spark_out)
    assert sorted(local) == sorted(on_spark)
    assert by_file(local) == by_file(on_spark)
    expected = {
        "tie-a": ["tie-a 1", "tie-a 2"],
        "tie-b": ["tie-b 1", "tie-b 2"],
        "crlf": ["crlf 1", "crlf 2", "crlf 4"],  # a CR before LF ends the line
        "nofinal": ["nofinal 1", "nofinal 2"],
        "bad": ["bad 1", "bad 2 \ufffd\ufffd!", "bad 3 \ufffd", "bad 5"],
        "final-cr": ["final-cr 1", "final-cr 2\r"],  # a CR is a line end only before LF
        "copied": ["copied 1", "copied 2"],
        "late10": ["late10 1", "late10 2"],
        "late2h": ["late2h 1", "late2h 2"],
        "tie-c": ["tie-c 1"],
        "new": ["new 1", "new 2", "new 3"],
    }
    grouped = by_file(local)
    # Empty lines (crlf.txt's third, newlines-only.txt's two, the undecodable "\xe2\x82" line
    # replaced) have no file name in them: counted apart.
    unnamed = grouped.pop("(no name)", [])
    assert grouped == expected
    assert sorted(unnamed) == sorted(["", "", "", "\ufffd"])
    assert "hidden" not in " ".join(local) and "temporary" not in " ".join(local)
