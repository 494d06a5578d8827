"""Records with columns written as JSON lines, CSV, Parquet and ORC: typed, readable by plain
readers, sized by the roll policy, and exactly once through crashes at every step of a bulk
file's life (staged Arrow stream -> converted file -> published)."""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
import logging
import random
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.common.columns import Columns
from operators.common.errors import BadRecordError
from operators.common.schema import arrow_schema
from operators.sink import bulk, formats
from operators.sink.settings import SinkSettings
from tests.landing import (
    BATCHES,
    STEPS,
    SinkEnv,
    SinkRun,
    filenum_order,
    write_steps,
    write_with_crash,
    write_without_crash,
)

SCHEMA = {"id": "int64", "name": "string", "day": "date", "amount": "decimal(10,2)"}
FORMATS = [("parquet", None), ("orc", None), ("csv", "gzip"), ("jsonl", "zstd"), ("csv", None)]
N = 40


def records(n: int = N) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "name": f"n{i}" + "é" * (i % 3),
            "day": f"2026-11-{1 + i % 28:02d}",
            "amount": i * 1.25,
        }
        for i in range(n)
    ]


def typed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a reader of the published files gets back for ``recs``."""
    return [
        {
            "id": r["id"],
            "name": r["name"],
            "day": datetime.date.fromisoformat(r["day"]),
            "amount": decimal.Decimal(repr(r["amount"])).quantize(decimal.Decimal("0.01")),
        }
        for r in recs
    ]


def read_rows(fmt: str, codec: str | None, data: bytes) -> list[dict[str, Any]]:
    """A published file as a plain reader sees it."""
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(data)).to_pylist()
    if fmt == "orc":
        return orc.ORCFile(pa.BufferReader(data)).read().to_pylist()
    if codec is not None:
        data = pa.CompressedInputStream(pa.BufferReader(data), codec).read()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in data.decode().splitlines()]
        return [
            {
                **r,
                "day": datetime.date.fromisoformat(r["day"]),
                "amount": decimal.Decimal(r["amount"]),
            }
            for r in rows
        ]
    options = pacsv.ConvertOptions(column_types=arrow_schema(SCHEMA))
    return pacsv.read_csv(pa.BufferReader(data), convert_options=options).to_pylist()


def published_rows(env: SinkEnv, fmt: str, codec: str | None) -> list[list[dict[str, Any]]]:
    files = env.published()
    return [read_rows(fmt, codec, files[name]) for name in sorted(files, key=filenum_order)]


def config(env: SinkEnv, fmt: str, codec: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "file": env.out + f"/part-%FILENUM.{fmt}",
        "format": fmt,
        "compression": codec,
        "schema": SCHEMA,
        **extra,
    }


# -- each format, as plain readers read it ---------------------------------------------------


@pytest.mark.parametrize(("fmt", "codec"), FORMATS, ids=str)
def test_each_format_publishes_typed_rows_a_plain_reader_reads_in_files_of_the_roll_size(
    sink_local: SinkEnv, fmt: str, codec: str | None
) -> None:
    run = SinkRun(sink_local, config(sink_local, fmt, codec, tuples_per_file=15))
    recs = records()
    pos = 0
    for size in BATCHES:  # a cut after every batch: files span cuts
        run.write(recs[pos : pos + size])
        pos += size
        run.cut()
    run.stop()
    files = published_rows(sink_local, fmt, codec)
    assert [len(f) for f in files] == [15, 15, 10]
    assert [row for f in files for row in f] == typed(recs)
    assert sink_local.hidden() == []


def test_a_csv_file_has_one_header_row_and_gzip_members_a_plain_gunzip_reads(
    sink_local: SinkEnv,
) -> None:
    run = SinkRun(sink_local, config(sink_local, "csv", "gzip"))
    for batch in ([{"id": 1, "name": 'a "quoted", value\nover two lines'}], [{"id": 2}]):
        run.write(batch)
        run.cut()
    run.stop()
    (data,) = sink_local.published().values()
    text = gzip.decompress(data).decode()
    assert text == ('"id","name","day","amount"\n1,"a ""quoted"", value\nover two lines",,\n2,,,\n')


def test_a_record_that_does_not_fit_is_rejected_naming_file_offset_column_and_value(
    sink_local: SinkEnv,
) -> None:
    run = SinkRun(
        sink_local,
        config(sink_local, "parquet", None, rejects_file="_rejects/r-%FILENUM.jsonl"),
    )
    recs = records(6)
    recs[2] = {**recs[2], "id": 2.5}
    recs[4] = {**recs[4], "colour": "red"}
    run.write(recs)
    run.stop()
    (data,) = sink_local.published().values()
    assert read_rows("parquet", None, data) == typed([recs[i] for i in (0, 1, 3, 5)])
    rejects = [
        json.loads(line)
        for name in sink_local.names(sink_local.out + "/_rejects")
        for line in sink_local.fs.read(sink_local.out + "/_rejects/" + name).decode().splitlines()
    ]
    reasons = [r["reason"] for r in rejects]
    assert len(reasons) == 2
    assert "record 2 " in reasons[0] and "part-0.parquet" in reasons[0]
    assert "column 'id': 2.5 is not a int64" in reasons[0]
    assert "record 4 " in reasons[1] and "column 'colour' is not in the schema" in reasons[1]


@pytest.mark.parametrize(
    ("value", "column", "shown"),
    [
        (1.5, "id", "1.5 is not a int64"),
        (2**70, "id", "is not a int64"),
        ("2026-13-01", "day", "'2026-13-01' is not a date"),
        (1.234, "amount", "is not a decimal(10,2)"),
        ([1, 2], "name", "[1, 2] is not a string"),
    ],
)
def test_no_value_is_converted_with_a_loss(value: Any, column: str, shown: str) -> None:
    settings_ = SinkSettings(file="/o/p-%FILENUM", format="parquet", schema=SCHEMA)
    encoder = formats.TableEncoder(settings_, _Fs(), settings_.rolling)
    with pytest.raises(BadRecordError) as caught:
        encoder.encode([{"id": 1}, {column: value}], 0, 2, "/o/p-0", 0)
    assert caught.value.offset == 1 and caught.value.field == column
    assert shown in str(caught.value)


class _Fs:
    def display(self, path: str) -> str:
        return "file://" + path


def test_a_bulk_write_is_arrows_message_buffer_itself_not_a_copy_of_it() -> None:
    # The file writer copies it once (into its buffer, or a send): a bytes copy first was a
    # second copy of every row.
    settings_ = SinkSettings(file="/o/p-%FILENUM", format="parquet", schema=SCHEMA)
    encoder = formats.TableEncoder(settings_, _Fs(), settings_.rolling)
    data, take = encoder.encode(records(3), 0, 3, "/o/p-0", 0)
    assert take == 3 and isinstance(data, memoryview) and isinstance(data.obj, pa.Buffer)
    stream = pa.py_buffer(encoder.header + bytes(data))
    assert pa.ipc.open_stream(stream).read_all().to_pylist() == typed(records(3))
    assert encoder.batch is not None and encoder.batch.num_rows == 3


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"format": "parquet"}, "needs [sink.schema]"),
        ({"format": "csv", "schema": {"a": "int65"}}, "unknown column type 'int65'"),
        ({"format": "line", "schema": {"a": "int64"}}, "is for records with columns"),
        ({"format": "jsonl", "compression": "snappy"}, "compression='snappy' cannot be used"),
        ({"format": "orc", "schema": SCHEMA, "publish": "visible"}, "use publish='atomic'"),
        ({"format": "csv", "schema": {"a": "decimal(40,2)"}}, "precision <= 38"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_a_file_is_written(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        SinkSettings(file="/o/p-%FILENUM", **given)


# -- crashes -----------------------------------------------------------------------------------


def run_without_crash(env: SinkEnv, cfg: dict[str, Any]) -> None:
    write_without_crash(SinkRun(env, cfg), records())


def run_with_crash(
    env: SinkEnv, cfg: dict[str, Any], cut_after: int, crash_after: int, how: str
) -> None:
    write_with_crash(SinkRun(env, cfg), records(), cut_after, crash_after, how)


# A tuple limit, and a byte limit on uncompressed text, roll at the exact record: the files
# are those of the run without a crash. A compressed or bulk file rolls after the write that
# reaches the byte limit, and the replay writes in other batch sizes: the same rows, in files
# cut elsewhere.
CRASH_CELLS = [
    ("parquet", None, {"tuples_per_file": 7}, "same files"),
    ("csv", "zstd", {"bytes_per_file": 200}, "same rows"),
]
LOCAL_CRASH_CELLS = [
    ("orc", None, {"tuples_per_file": 7}, "same files"),
    ("jsonl", None, {"bytes_per_file": 300}, "same files"),
]


@pytest.mark.parametrize(("fmt", "codec", "limit", "promise"), CRASH_CELLS, ids=str)
def test_resume_after_crash_publishes_what_the_run_without_crash_publishes(
    sink_env: SinkEnv, fmt: str, codec: str | None, limit: dict[str, int], promise: str
) -> None:
    check_resume(sink_env, fmt, codec, limit, promise)


@pytest.mark.parametrize(("fmt", "codec", "limit", "promise"), LOCAL_CRASH_CELLS, ids=str)
def test_resume_after_crash_publishes_what_the_run_without_crash_publishes_locally(
    sink_local: SinkEnv, fmt: str, codec: str | None, limit: dict[str, int], promise: str
) -> None:
    check_resume(sink_local, fmt, codec, limit, promise)


def check_resume(
    sink_env: SinkEnv, fmt: str, codec: str | None, limit: dict[str, int], promise: str
) -> None:
    clean = SinkEnv(sink_env.fs, sink_env.root + "/clean")
    run_without_crash(clean, config(clean, fmt, codec, **limit))
    expected = published_rows(clean, fmt, codec)
    assert [row for f in expected for row in f] == typed(records())
    assert len(expected) > 2
    for case, (cut_after, crash_after, how) in enumerate(
        [(2, 3, "unstored"), (4, 4, "unpublished"), (0, 6, "unpublished"), (5, 8, "unstored")]
    ):
        env = SinkEnv(sink_env.fs, f"{sink_env.root}/case{case}")
        run_with_crash(env, config(env, fmt, codec, **limit), cut_after, crash_after, how)
        got = published_rows(env, fmt, codec)
        if promise == "same files":
            assert got == expected, (cut_after, crash_after, how)
        else:
            assert [row for f in got for row in f] == typed(records()), (cut_after, crash_after)
            assert len(got) > 2
        assert env.hidden() == []


class _Crash(BaseException):
    """The process dies here (not an Exception: nothing may catch it)."""


@pytest.mark.parametrize(
    "step",
    [
        "writing the converted file",
        "the early file half written",
        "after it, before the next cut",
        "after the cut, before the publish",
    ],
)
def test_a_crash_at_each_step_of_a_bulk_file_loses_and_repeats_nothing(
    sink_local: SinkEnv, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(sink_local, "parquet", "zstd", tuples_per_file=10)
    recs = records(25)
    run = SinkRun(sink_local, cfg)
    run.write(recs[:6])
    run.cut()  # the staged file holds 6 records at this cut
    if step == "writing the converted file":
        real = formats.convert

        def half(fs: Any, staged: str, target: str, *args: Any) -> Any:
            out = fs.create(target, overwrite=True)
            out.write(b"PAR1 half a file")
            out.sync()
            out.close()
            raise _Crash

        monkeypatch.setattr("operators.sink.operator.convert", half)

        # The early file fails on its thread: the staged file is converted at the roll.
        def fail(self: Any, pieces: list[bytes]) -> None:
            raise OSError("the early file's disk is full")

        monkeypatch.setattr("operators.sink.bulk.Early._take", fail)
        with pytest.raises(_Crash):
            run.write(recs[6:12])  # the 10th record rolls the file: converted
        monkeypatch.setattr("operators.sink.operator.convert", real)
        assert any(n.endswith(".inprogress") for n in sink_local.hidden())
        run.crash()
        replay = 6
    elif step == "the early file half written":
        monkeypatch.setattr(bulk, "_HANDOFF_BYTES", 1)  # each write handed to the thread
        run.write(recs[6:9])  # no roll: the Parquet file is being written beside the staged
        deadline = time.monotonic() + 30
        while {n.rsplit(".", 1)[1] for n in sink_local.hidden()} != {"arrow", "inprogress"}:
            assert time.monotonic() < deadline, sink_local.hidden()
            time.sleep(0.01)
        run.crash()
        replay = 6
    elif step == "after it, before the next cut":
        run.write(recs[6:12])
        assert {n.rsplit(".", 1)[1] for n in sink_local.hidden()} == {"arrow", "inprogress"}
        run.crash()
        replay = 6
    else:
        run.write(recs[6:12])
        run.cut(complete=False)  # stored: the converted file is pending, not published
        run.crash()
        replay = 12
    for start in range(replay, 25, 4):
        run.write(recs[start : start + 4])
    run.stop()
    files = published_rows(sink_local, "parquet", None)
    assert [row for f in files for row in f] == typed(recs)
    assert [len(f) for f in files] == [10, 10, 5]
    assert sink_local.hidden() == []


def test_a_format_changed_between_runs_closes_the_open_file_as_it_was_written(
    sink_local: SinkEnv, caplog: pytest.LogCaptureFixture
) -> None:
    recs = records(12)
    run = SinkRun(sink_local, config(sink_local, "csv", None))
    run.write(recs[:5])
    run.cut()  # the csv file is open at the cut
    wider = {**SCHEMA, "note": "string"}
    run.settings = SinkSettings(**{**config(sink_local, "parquet", None), "schema": wider})
    with caplog.at_level(logging.WARNING):
        run.crash()
    assert "was written as csv/none" in caplog.text
    run.write([{**r, "note": "x"} for r in recs[5:]])
    run.stop()
    files = sink_local.published()
    (csv_name,) = [n for n in files if n.endswith(".csv")]
    (parquet_name,) = [n for n in files if n.endswith(".parquet")]
    assert read_rows("csv", None, files[csv_name]) == typed(recs[:5])
    assert pq.read_table(pa.BufferReader(files[parquet_name])).num_rows == 7
    assert sink_local.hidden() == []


def test_a_schema_changed_between_runs_converts_the_open_file_with_its_own_schema(
    sink_local: SinkEnv,
) -> None:
    recs = records(8)
    run = SinkRun(sink_local, config(sink_local, "parquet", None))
    run.write(recs[:3])
    run.cut()
    run.settings = SinkSettings(
        **{**config(sink_local, "parquet", None), "schema": {"id": "int64"}}
    )
    run.crash()
    run.write([{"id": r["id"]} for r in recs[3:]])
    run.stop()
    tables = [pq.read_table(pa.BufferReader(d)) for _, d in sorted(sink_local.published().items())]
    assert [t.schema.names for t in tables] == [list(SCHEMA), ["id"]]
    assert [t.num_rows for t in tables] == [3, 5]


# -- property: random batches, cuts and crashes ------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(STEPS, max_size=25),
    fmt=st.sampled_from(FORMATS),
    limit=st.sampled_from([{}, {"tuples_per_file": 4}, {"bytes_per_file": 900}]),
)
def test_every_record_is_published_once_under_random_cuts_and_crashes(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[Any, ...]],
    fmt: tuple[str, str | None],
    limit: dict[str, int],
) -> None:
    from operators.fs import LocalFileSystem

    env = SinkEnv(LocalFileSystem(), str(tmp_path_factory.mktemp("prop")))
    recs = records(200)
    write_steps(SinkRun(env, config(env, *fmt, **limit)), recs, steps)
    files = published_rows(env, *fmt)
    assert [row for f in files for row in f] == typed(recs)
    if "tuples_per_file" in limit:
        assert all(len(f) <= 4 for f in files)
    assert env.hidden() == []


# -- compressed lines and blocks -----------------------------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("fmt", ["line", "binary"])
def test_compressed_lines_and_blocks_resume_after_crashes_as_one_valid_stream(
    sink_local: SinkEnv, codec: str, fmt: str
) -> None:
    recs: list[Any] = [f"line {i} " + "é" * (i % 4) for i in range(60)]
    if fmt == "binary":
        recs = [r.encode() + b"|" for r in recs]
    cfg = {
        "file": sink_local.out + "/part-%FILENUM",
        "format": fmt,
        "compression": codec,
        "tuples_per_file": 25,
    }
    run = SinkRun(sink_local, cfg)
    pos = cut_pos = 0
    for step, size in enumerate([7, 5, 9, 4, 8, 6, 3, 9, 9]):
        run.write(recs[pos : pos + size])
        pos += size
        if step % 3 != 2:
            run.cut()
            cut_pos = pos
        else:
            run.crash()  # the records after the last cut are replayed
            pos = cut_pos
    run.write(recs[pos:])
    run.stop()
    files = sink_local.published()
    data = b"".join(
        pa.CompressedInputStream(pa.BufferReader(files[n]), codec).read()
        for n in sorted(files, key=filenum_order)
    )
    expected = b"".join((r + "\n").encode() for r in recs) if fmt == "line" else b"".join(recs)
    assert data == expected
    assert len(files) == 3  # 25 records per file
    assert sink_local.hidden() == []


def test_compression_switched_on_between_runs_never_mixes_in_one_file(
    sink_local: SinkEnv,
) -> None:
    run = SinkRun(sink_local, {"file": sink_local.out + "/part-%FILENUM"})
    run.write(["a", "b"])
    run.cut()
    run.settings = SinkSettings(file=sink_local.out + "/part-%FILENUM", compression="gzip")
    run.crash()
    run.write(["c"])
    run.stop()
    files = sink_local.published()
    assert files["part-0"] == b"a\nb\n"
    assert gzip.decompress(files["part-1"]) == b"c\n"


def test_a_headerless_csv_whose_columns_changed_between_runs_is_not_appended_to(
    sink_local: SinkEnv,
) -> None:
    cfg = {**config(sink_local, "csv", None), "header": False, "schema": {"id": "int64"}}
    run = SinkRun(sink_local, cfg)
    run.write([{"id": 1}])
    run.cut()
    run.settings = SinkSettings(
        **{**cfg, "schema": {"id": "int64", "day": "date"}, "delimiter": ";"}
    )
    run.crash()
    run.write([{"id": 2, "day": "2026-01-01"}])
    run.stop()
    files = sink_local.published()
    assert sorted(files.values()) == [b"1\n", b"2;2026-01-01\n"]


def test_compressed_visible_files_need_truncate(sink_local: SinkEnv) -> None:
    from operators.sink import HDFS2FileSink
    from region.errors import ConfigError
    from tests.sink.test_sink_replay import NoTruncate

    settings_ = SinkSettings(
        file=sink_local.out + "/p-%FILENUM.gz",
        compression="gzip",
        publish="visible",
        delivery="at_least_once",
    )
    with pytest.raises(ConfigError, match="needs truncate"):
        HDFS2FileSink(settings_, NoTruncate(sink_local.fs))


_SOURCE_TYPES = {
    "id": ["int64", "int32", "string", "double"],
    "name": ["string", "int64"],
    "day": ["date", "timestamp", "string"],
    "amount": ["double", "string", "decimal(12,3)"],
}
_CELL = {
    "id": st.one_of(st.none(), st.integers(-5, 5), st.sampled_from([" 7", "x", 2.5, 2**40])),
    "name": st.one_of(st.none(), st.text(max_size=4), st.integers(0, 9)),
    "day": st.one_of(
        st.none(),
        st.dates(datetime.date(2026, 1, 1), datetime.date(2026, 12, 31)),
        st.datetimes(datetime.datetime(2026, 1, 1), datetime.datetime(2026, 1, 2)),
        st.sampled_from(["2026-11-28", "bad"]),
    ),
    "amount": st.one_of(
        st.none(), st.sampled_from([1.5, 1.25, 1.234, 0.1, "2.5", "x", decimal.Decimal("1.005")])
    ),
}


@settings(max_examples=80, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["parquet", "csv", "jsonl"]))
def test_records_that_are_columns_are_encoded_as_the_same_records_one_by_one(
    data: st.DataObject, fmt: str
) -> None:
    """Records a source hands on as columns are written in the bytes the same records as
    mappings are written in, and a value that does not fit is refused with the same message,
    whatever the source's column types."""
    types = {name: data.draw(st.sampled_from(options)) for name, options in _SOURCE_TYPES.items()}
    source = arrow_schema(types)
    rows = []
    for _ in range(data.draw(st.integers(1, 12))):
        row = {}
        for field in source:
            value = data.draw(_CELL[field.name])
            try:  # a value the source column holds
                pa.array([value], type=field.type, from_pandas=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                value = None
            row[field.name] = value
        rows.append(row)
    records = Columns(pa.Table.from_pylist(rows, schema=source))
    settings_ = SinkSettings(file="/o/p-%FILENUM", format=fmt, schema=SCHEMA)
    start = data.draw(st.integers(0, len(rows) - 1))
    take = len(rows) - start

    def encode(given: Any) -> Any:
        encoder = formats.TableEncoder(settings_, _Fs(), settings_.rolling)
        try:
            return encoder.encode(given, start, take, "/o/p-0", 0)
        except BadRecordError as exc:
            return exc.offset, exc.field, str(exc)

    assert encode(records) == encode(records.rows())


# -- a bulk file encoded while it is written -------------------------------------------------


def _row_groups(data: bytes) -> list[int]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def test_a_parquet_file_is_encoded_while_its_stream_grows_and_rolls_into_the_same_rows(
    sink_local: SinkEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "GROUP_ROWS", 4)
    monkeypatch.setattr(bulk, "_HANDOFF_BYTES", 1)  # each write handed to the thread
    rng = random.Random(7)
    # Names of 300 KB: row groups pass the encoder's buffer and the file writer's (1 MB each)
    # before the roll.
    recs = [{**r, "name": rng.randbytes(150_000).hex()} for r in records(25)]
    run = SinkRun(sink_local, config(sink_local, "parquet", None, tuples_per_file=10))
    for start in range(0, 8, 2):
        run.write(recs[start : start + 2])
    # Before the roll, row groups are already in the in-progress Parquet file (a byte on the
    # disk means a full writer's buffer: more than a row group).
    target = sink_local.out + "/.part-0.parquet~sink.inprogress"
    deadline = time.monotonic() + 30
    while not sink_local.fs.exists(target) or sink_local.fs.status(target).size == 0:
        assert time.monotonic() < deadline, "the Parquet file was not written before its roll"
        time.sleep(0.05)
    for start in range(8, 25, 2):
        run.write(recs[start : start + 2])
    run.stop()
    files = sink_local.published()
    names = sorted(files, key=filenum_order)
    assert [row for n in names for row in read_rows("parquet", None, files[n])] == typed(recs)
    # Groups of whole writes, each at least GROUP_ROWS rows but the last of a file.
    assert [_row_groups(files[n]) for n in names] == [[4, 4, 2], [4, 4, 2], [4, 1]]
    assert sink_local.hidden() == []


class _Writes:
    """A file writer that keeps the size of each write."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def write(self, data: bytes) -> None:
        self.sizes.append(len(data))


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_a_bulk_file_reaches_its_writer_in_writes_of_the_encoders_buffer(fmt: str) -> None:
    # The encoder writes each page and each header apart (dozens of writes a row group);
    # each write to the Python stream takes the interpreter lock, which a conversion thread
    # waits for while the writing thread holds it. Buffered, a few writes carry a file.
    rng = random.Random(3)
    n = 100_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "amount": pa.array([rng.random() for _ in range(n)], pa.float64()),
            "note": pa.array([f"note {rng.randrange(1 << 30)}" for _ in range(n)]),
        }
    )
    out = _Writes()
    writer = bulk.BulkWriter(out, fmt, None, table.schema)  # type: ignore[arg-type]
    for batch in table.to_batches(max_chunksize=10_000):
        writer.add(batch)
    size = writer.close()
    assert sum(out.sizes) == size > 2 * bulk._SINK_BUFFER
    assert len(out.sizes) <= 2 * (size // bulk._SINK_BUFFER) + 2


def test_many_open_partitions_write_smaller_row_groups_not_more_memory(
    sink_local: SinkEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "_EARLY_BYTES", 1)  # every write is over the bound
    monkeypatch.setattr(bulk, "_HANDOFF_BYTES", 1)
    recs = [{**r, "name": f"p{r['id'] % 3}"} for r in records(30)]
    cfg = config(sink_local, "parquet", None, partition_by=["name"])
    run = SinkRun(sink_local, cfg)
    for start in range(0, 30, 6):
        run.write(recs[start : start + 6])
    run.stop()
    for part in ("p0", "p1", "p2"):
        files = sink_local.published(f"{sink_local.out}/name={part}")
        assert len(files) == 1, files.keys()
        (data,) = files.values()
        # Each write's two rows of this partition are a row group of their own.
        assert _row_groups(data) == [2] * 5, part
        ids = [r["id"] for r in read_rows("parquet", None, data)]
        assert ids == [r["id"] for r in recs if r["name"] == part]


def test_files_that_close_together_finish_their_early_files_on_both_threads_at_once(
    sink_local: SinkEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two partitions' files, one on each conversion thread, close at the final punctuation:
    # the last row group and footer of one are written while the other's are. The first
    # finish to begin waits for the second to begin too (a finish begun only once the one
    # before it ended would never see it: the wait below gives up, and the test fails).
    real = bulk.BulkWriter.close
    began = threading.Event()
    entered: list[str] = []
    together: list[bool] = []

    def close(self: bulk.BulkWriter) -> int:
        entered.append(threading.current_thread().name)
        if len(entered) == 1:
            together.append(began.wait(timeout=10))
        else:
            began.set()
        return real(self)

    monkeypatch.setattr(bulk.BulkWriter, "close", close)
    recs = [{**r, "name": f"p{r['id'] % 2}"} for r in records(20)]
    run = SinkRun(sink_local, config(sink_local, "parquet", None, partition_by=["name"]))
    run.write(recs)
    run.stop()
    assert together == [True] and len(set(entered)) == 2
    for part in ("p0", "p1"):
        (data,) = sink_local.published(f"{sink_local.out}/name={part}").values()
        ids = [r["id"] for r in read_rows("parquet", None, data)]
        assert ids == [r["id"] for r in recs if r["name"] == part]


def test_an_early_file_takes_the_written_batches_as_they_are_not_their_bytes_read_back(
    sink_local: SinkEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Reading the staged stream's bytes back (a copy of every row) is only for bytes fed
    # without their batch; the sink feeds each write's batch.
    def no_reading_back(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the early conversion read the staged bytes back")

    monkeypatch.setattr(bulk.ipc, "open_stream", no_reading_back)
    monkeypatch.setattr(bulk, "_HANDOFF_BYTES", 1)  # each write handed to the thread
    recs = records(25)
    run = SinkRun(sink_local, config(sink_local, "parquet", None, tuples_per_file=10))
    with caplog.at_level(logging.WARNING):
        for start in range(0, 25, 3):
            run.write(recs[start : start + 3])
        run.sink.finish()
    assert "early conversion of" not in caplog.text
    monkeypatch.undo()
    run.cut()
    run.sink.close()
    assert [row for f in published_rows(sink_local, "parquet", None) for row in f] == typed(recs)
    assert sink_local.hidden() == []


def test_an_early_file_that_fails_is_converted_from_its_stream_at_the_roll(
    sink_local: SinkEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = bulk.Early._take
    calls = [0]

    def fail_third(self: Any, pieces: list[bytes]) -> None:
        calls[0] += 1
        if calls[0] == 3:  # in the first file, its second write
            raise OSError("no space left on device")
        real(self, pieces)

    monkeypatch.setattr(bulk.Early, "_take", fail_third)
    monkeypatch.setattr(bulk, "_HANDOFF_BYTES", 1)  # each write handed to the thread
    recs = records(25)
    run = SinkRun(sink_local, config(sink_local, "orc", "zstd", tuples_per_file=10))
    with caplog.at_level(logging.WARNING):
        for start in range(0, 25, 3):
            run.write(recs[start : start + 3])
        run.stop()
    assert "early conversion of" in caplog.text and "no space left on device" in caplog.text
    assert [row for f in published_rows(sink_local, "orc", "zstd") for row in f] == typed(recs)
    assert sink_local.hidden() == []
