"""CSV and JSON-lines ranges read in a Spark task, without Spark: the planning keeps a CSV or
compressed file whole, the reading owns each row once, a bad row is named."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from operators.fs.local import LocalFileSystem
from operators.source.rows import Rejected
from operators.spark.options import scan_config
from operators.spark.rows_io import read_rows
from operators.spark.source import HdfsScanStreamReader, ScanPartition
from region.errors import ConfigError
from tests.spark.helpers import write_inputs

T0 = 1_700_000_000_000_000_000
SCHEMA = json.dumps({"id": "int64", "name": "string", "amount": "decimal(10,2)"})
#: Row 2's name holds a line end and a comma; row "bad" has an id that is not an int64.
CSV = b'id,name,amount\n1,plain,1.50\n2,"two\nlines, quoted",2.25\nbad,x,3\n3,"q""uote",4\n'
ROWS = [
    {"id": 1, "name": "plain", "amount": "1.50"},
    {"id": 2, "name": "two\nlines, quoted", "amount": "2.25"},
    {"id": 3, "name": 'q"uote', "amount": "4.00"},
]


def reader(src: Path, **options: str) -> HdfsScanStreamReader:
    plans = str(src.parent / f"{src.name}-plans")
    base = {"directory": str(src), "plan_dir": plans, "schema": SCHEMA}
    return HdfsScanStreamReader(scan_config({**base, **options}))


def records(r: HdfsScanStreamReader, limit: Any = None) -> tuple[list[list[Any]], list[dict]]:
    """Each partition's ranges of one batch, and the rows read from them."""
    start = r.initialOffset()
    end = r.latestOffset(start, limit or ReadAllAvailable())
    parts, rows = [], []
    for p in r.partitions(start, end):
        assert isinstance(p, ScanPartition)
        parts.append([(Path(x[0]).name, x[1], x[2]) for x in p.ranges])
        rows += [row for batch in r.read(p) for row in batch.to_pylist()]
    for row in rows:
        if "amount" in row:
            row["amount"] = str(row["amount"])
    return parts, rows


def test_a_csv_file_is_one_range_whatever_the_split_size_and_each_row_is_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a.csv": CSV, "b.csv.gz": gzip.compress(CSV)}, T0)
    r = reader(src, format="csv", split_size="8", include_file_info="true")
    with caplog.at_level(logging.ERROR, logger="operators.spark.rows_io"):
        parts, rows = records(r)
    # A split of 8 bytes would cut the quoted line end: each file is one task's, whole.
    gz_size = (src / "b.csv.gz").stat().st_size
    assert parts == [[("a.csv", 0, len(CSV))], [("b.csv.gz", 0, gz_size)]]
    offsets = [15, 28, 63]  # of each row, in the (decompressed) file
    expected = [
        {**row, "file": f"file://{src / name}", "offset": at}
        for name in ("a.csv", "b.csv.gz")
        for row, at in zip(ROWS, offsets, strict=True)
    ]
    assert rows == expected
    # The bad row, named by file, byte offset, column and value, once per file.
    bad = [r.getMessage() for r in caplog.records if "skipped the row" in r.getMessage()]
    assert len(bad) == 2
    assert f"{src / 'a.csv'} at byte 55: column 'id': 'bad' is not a int64" in bad[0]
    assert "'bad,x,3'" in bad[0]


def test_a_csv_file_is_never_cut_by_a_batch_limit(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a.csv": CSV, "b.csv": CSV}, T0)
    r = reader(src, format="csv", max_bytes_per_trigger="20")
    parts, rows = records(r, ReadMaxBytes(20))
    assert parts == [[("a.csv", 0, len(CSV))]]  # one whole file, not 20 bytes of it
    assert rows == ROWS


def test_jsonl_ranges_cut_anywhere_read_each_row_once(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) for i in range(40)]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "a.jsonl"
    path.write_bytes(data)
    config = scan_config(
        {"directory": str(tmp_path), "plan_dir": str(tmp_path) + "-p", "schema": SCHEMA}
        | {"format": "jsonl"}
    )
    fs = LocalFileSystem()
    for cut in (1, 7, 40, 333, len(data) - 1):
        got = []
        for start, end in ((0, cut), (cut, len(data))):
            for batch in read_rows(fs, str(path), start, end, size=len(data), config=config):
                got += [row["id"] for row in batch.to_pylist()]
        assert got == list(range(40)), cut


def test_a_gzip_file_that_grew_by_a_member_is_read_on_after_what_was_read(
    tmp_path: Path,
) -> None:
    first, more = CSV, b"4,later,5\n"
    path = tmp_path / "a.csv.gz"
    head = gzip.compress(first)
    path.write_bytes(head + gzip.compress(more))
    config = scan_config(
        {"directory": str(tmp_path), "plan_dir": str(tmp_path) + "-p", "schema": SCHEMA}
        | {"format": "csv", "include_file_info": "true"}
    )
    rejected: list[Rejected] = []
    size = path.stat().st_size
    batches = read_rows(
        LocalFileSystem(),
        str(path),
        len(head),
        size,
        size=size,
        config=config,
        on_rejected=rejected.append,
    )
    rows = [row for b in batches for row in b.to_pylist()]
    # The header is the file's; the offset counts decompressed bytes, as the local engine's.
    assert [(r["id"], r["name"], r["offset"]) for r in rows] == [(4, "later", len(first))]
    assert rejected == []


def _compress(codec: str, data: bytes) -> bytes:
    import pyarrow as pa

    if codec == "gz":  # two members: concatenated, as gzip tools append
        half = len(data) // 2
        return gzip.compress(data[:half]) + gzip.compress(data[half:])
    name = {"bz2": "bz2", "zst": "zstd", "lz4": "lz4"}[codec]
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, name) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("codec", ["gz", "bz2", "zst", "lz4"])
def test_compressed_lines_and_blocks_are_read_decompressed_each_file_by_one_task(
    tmp_path: Path, codec: str
) -> None:
    src = tmp_path / "in"
    lines = [f"line {i} " + "x" * (i % 50) for i in range(5000)]
    text = ("\n".join(lines) + "\n").encode()
    write_inputs(src, {f"a.log.{codec}": _compress(codec, text), "b.log": b"plain\nlast"}, T0)
    # Small chunks and splits: the compressed file is one range whatever they say.
    r = plain_reader(src, include_file_info="true", read_chunk="4096", split_size="4096")
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())
    parts = list(r.partitions(o0, o1))
    assert [len(p.ranges) for p in parts if any(f".{codec}" in x[0] for x in p.ranges)] == [1]
    rows = [row for p in parts for b in r.read(p) for row in b.to_pylist()]
    got = [x["value"] for x in rows if x["file"].endswith(codec)]
    assert got == lines
    # Offsets count decompressed bytes, as the local engine's.
    offsets = [x["offset"] for x in rows if x["file"].endswith(codec)]
    assert offsets[:3] == [0, len(lines[0]) + 1, len(lines[0]) + len(lines[1]) + 2]
    assert [x["value"] for x in rows if x["file"].endswith("b.log")] == ["plain", "last"]
    # Blocks: the decompressed bytes, cut every block_size.
    blocks = plain_reader(
        src, format="binary", block_size="1000", read_chunk="4096", include_file_info="true"
    )
    b0 = blocks.initialOffset()
    b1 = blocks.latestOffset(b0, ReadAllAvailable())
    read = [x for p in blocks.partitions(b0, b1) for b in blocks.read(p) for x in b.to_pylist()]
    mine = [x for x in read if x["file"].endswith(codec)]
    assert b"".join(x["value"] for x in mine) == text
    assert [x["offset"] for x in mine] == list(range(0, len(text), 1000))


def plain_reader(src: Path, **options: str) -> HdfsScanStreamReader:
    plans = str(src.parent / f"{src.name}-plans-{len(options)}")
    return HdfsScanStreamReader(scan_config({"directory": str(src), "plan_dir": plans, **options}))


def test_jsonl_needs_a_schema(tmp_path: Path) -> None:
    src = tmp_path / "in"
    with pytest.raises(ConfigError, match="format='jsonl' needs the option 'schema'"):
        scan_config({"directory": str(src), "plan_dir": f"{src}-p", "format": "jsonl"})


def test_a_young_csv_file_whose_last_row_has_no_line_end_waits_whole(tmp_path: Path) -> None:
    """The planner holds a young file's unterminated last line back; a CSV line end may be
    inside a quoted value, so the whole file waits (never a range ending inside a row)."""
    src = tmp_path / "in"
    src.mkdir()
    path = src / "a.csv"
    path.write_bytes(b'id,name,amount\n1,"first\nhalf')  # mtime now: young, still written
    r = reader(src, format="csv", hold_partial_line="1s")
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())
    assert list(r.partitions(o0, o1)) == [] and len(o1["held"]) == 1
    with path.open("ab") as f:
        f.write(b' second",1.5\n')
    o2 = r.latestOffset(o1, ReadAllAvailable())
    parts = r.partitions(o1, o2)
    rows = [row for p in parts for b in r.read(p) for row in b.to_pylist()]
    assert [(x["id"], x["name"]) for x in rows] == [(1, "first\nhalf second")]


def test_on_hdfs_a_csv_and_a_gzipd_csv_are_read_whole_each_row_once(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import posixpath
    import time

    from tests.conftest import CLUSTER_USER, real_fs

    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox's Hadoop configuration (HDFS_URI is set)")
    landing = posixpath.join(base, f"rows-{time.monotonic_ns()}", "landing")
    fs.mkdirs(landing)
    for name, data in (("a.csv", CSV), ("b.csv.gz", gzip.compress(CSV))):
        writer = fs.create(posixpath.join(landing, name))
        writer.write(data)
        writer.close()
        time.sleep(0.005)  # HDFS keeps milliseconds: distinct mtimes
    r = HdfsScanStreamReader(
        scan_config(
            {
                "directory": f"{sandbox.info.hdfs}{landing}",
                "user": CLUSTER_USER,
                "config_dir": sandbox.info.conf_dir,
                "plan_dir": f"file://{tmp_path / 'plans'}",
                "schema": SCHEMA,
                "format": "csv",
                "split_size": "8",
            }
        )
    )
    parts, rows = records(r)
    assert [[name for name, _, _ in p] for p in parts] == [["a.csv"], ["b.csv.gz"]]
    assert rows == ROWS + ROWS


@pytest.mark.parametrize("quoted", [False, True], ids=["arrow-block", "row-by-row"])
def test_each_records_offset_is_where_its_row_starts_on_both_parse_paths(
    tmp_path: Path, quoted: bool
) -> None:
    # A quote or a bad row sends the block row by row; else Arrow reads it at once.
    name, bad = (b'"b"', b"x,bad,1\n") if quoted else (b"b", b"")
    data = b"id,name,amount\n1,a,1\n\n2," + name + b",2\r\n" + bad + b"3,c,3"
    path = tmp_path / "a.csv"
    path.write_bytes(data)
    config = scan_config(
        {"directory": str(tmp_path), "plan_dir": str(tmp_path) + "-p", "schema": SCHEMA}
        | {"format": "csv", "include_file_info": "true"}
    )
    rows = [
        (row["id"], row["offset"])
        for b in read_rows(
            LocalFileSystem(),
            str(path),
            0,
            len(data),
            size=len(data),
            config=config,
            on_rejected=lambda r: None,
        )
        for row in b.to_pylist()
    ]
    assert rows == [(1, data.index(b"1,a")), (2, data.index(b"2,")), (3, data.index(b"3,c"))]


def test_a_compressed_file_cut_short_fails_naming_it_and_the_way(tmp_path: Path) -> None:
    path = tmp_path / "a.csv.gz"
    whole = gzip.compress(CSV * 50)
    path.write_bytes(whole[: len(whole) // 2])  # still being copied when listed
    config = scan_config(
        {"directory": str(tmp_path), "plan_dir": str(tmp_path) + "-p", "schema": SCHEMA}
        | {"format": "csv"}
    )
    size = path.stat().st_size
    with pytest.raises(OSError, match=r"a\.csv\.gz is not a whole gzip stream .* hidden name"):
        list(read_rows(LocalFileSystem(), str(path), 0, size, size=size, config=config))
