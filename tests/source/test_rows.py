"""CSV and JSON-lines rows read as typed records: a quoted value may hold line ends, a resume is
always at a row boundary, and a row that does not fit is named (file, byte offset, column,
value) and handed to the rejects, never lost in silence."""

from __future__ import annotations

import csv
import datetime
import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.common.errors import BadRecordError
from operators.fs.local import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.source.rows import Rejected, Rows
from region.state import Batch
from tests.landing import SinkEnv
from tests.source.test_source import read_all, rebuild

SCHEMA = {"id": "int64", "name": "string", "day": "date"}


def csv_text(rows: list[tuple[Any, ...]], header: tuple[str, ...] = ("id", "name", "day")) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def source_of(tmp_path: Any, data: str | bytes, **given: Any) -> HDFS2FileSource:
    path = tmp_path / "in.csv"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    options: dict[str, Any] = {"format": "csv", "schema": SCHEMA, **given}
    source = HDFS2FileSource(SourceSettings(file=str(path), **options), LocalFileSystem())
    source.reset_to_initial_state()
    return source


def test_quoted_values_with_line_ends_commas_and_quotes_are_one_typed_record(
    tmp_path: Any,
) -> None:
    rows = [(1, "two\nlines", "2026-11-28"), (2, 'a, "b"', "2026-11-29"), (3, "", "")]
    batches = read_all(source_of(tmp_path, csv_text(rows)))
    assert [r for b in batches for r in b.records] == [
        {"id": 1, "name": "two\nlines", "day": datetime.date(2026, 11, 28)},
        {"id": 2, "name": 'a, "b"', "day": datetime.date(2026, 11, 29)},
        {"id": 3, "name": None, "day": None},  # "" is a null value by default
    ]
    assert batches[-1].punctuation


def test_crlf_rows_an_escape_character_and_a_last_row_without_line_end(tmp_path: Any) -> None:
    data = 'id;name;day\r\n1;"say \\"hi\\"\r\nthere";2026-01-02\r\n2;x;2026-01-03'
    source = source_of(tmp_path, data, delimiter=";", escape="\\")
    got = [r for b in read_all(source) for r in b.records]
    assert got == [
        {"id": 1, "name": 'say "hi"\r\nthere', "day": datetime.date(2026, 1, 2)},
        {"id": 2, "name": "x", "day": datetime.date(2026, 1, 3)},
    ]


def test_a_row_that_does_not_fit_is_rejected_with_file_offset_column_and_value(
    tmp_path: Any,
) -> None:
    data = csv_text([(1, "a", "2026-11-28"), ("x", "b", "2026-11-28"), (3, "c", "2026-02-30")])
    data += "4,too,many,fields\n"
    batches = read_all(source_of(tmp_path, data))
    assert [r["id"] for b in batches for r in b.records] == [1]
    rejected = [r for b in batches for r in b.rejected]
    first = len("id,name,day\n1,a,2026-11-28\n")
    assert [(r.offset, r.text) for r in rejected] == [
        (first, "x,b,2026-11-28"),
        (first + 15, "3,c,2026-02-30"),
        (first + 30, "4,too,many,fields"),
    ]
    assert "column 'id': 'x' is not a int64" in rejected[0].reason
    assert "column 'day': '2026-02-30' is not a date" in rejected[1].reason
    assert "4 fields where the columns are 3" in rejected[2].reason
    assert all(r.file.endswith("in.csv") for r in rejected)


def test_on_bad_row_fail_stops_naming_the_row_and_skip_counts_it(tmp_path: Any) -> None:
    data = csv_text([(1, "a", "2026-11-28"), ("x", "b", "2026-11-28")])
    with pytest.raises(BadRecordError, match=r"in\.csv at byte 27: column 'id': 'x'"):
        read_all(source_of(tmp_path, data, on_bad_row="fail"))
    source = source_of(tmp_path, data, on_bad_row="skip")
    assert [r["id"] for b in read_all(source) for r in b.records] == [1]
    assert source._pending.skipped == 1


def test_the_header_names_the_columns_in_any_order_and_other_columns_are_left_out(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    data = csv_text([("2026-11-28", "x", 7, "a")], header=("day", "extra", "id", "name"))
    got = [r for b in read_all(source_of(tmp_path, data)) for r in b.records]
    assert got == [{"id": 7, "name": "a", "day": datetime.date(2026, 11, 28)}]
    assert "columns extra are not in [source.schema]" in caplog.text
    with pytest.raises(ValueError, match="the header row has no column 'name'"):
        read_all(source_of(tmp_path, "id,day\n1,2026-11-28\n"))


def test_jsonl_rows_without_a_schema_are_mappings_and_with_one_typed(tmp_path: Any) -> None:
    data = '{"id": 1, "tags": ["a"]}\n[1, 2]\n{"id": "2", "day": "2026-11-28", "x": 1}\nnot json\n'
    source = source_of(tmp_path, data, format="jsonl", schema=None)
    batches = read_all(source)
    assert [r for b in batches for r in b.records] == [
        {"id": 1, "tags": ["a"]},
        {"id": "2", "day": "2026-11-28", "x": 1},
    ]
    reasons = [r.reason for b in batches for r in b.rejected]
    assert reasons[0] == "a JSON list, not an object"
    assert reasons[1].startswith("not JSON at character 0")
    typed = source_of(tmp_path, data, format="jsonl", schema={"id": "int64", "day": "date"})
    assert [r for b in read_all(typed) for r in b.records] == [
        {"id": 1, "day": None},
        {"id": 2, "day": datetime.date(2026, 11, 28)},
    ]


def test_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match=r"format='csv' needs \[source.schema\]"):
        SourceSettings(file="/a", format="csv")
    with pytest.raises(ValueError, match="must differ"):
        SourceSettings(file="/a", format="csv", schema=SCHEMA, delimiter='"')
    with pytest.raises(ValueError, match=r"\[source.schema\] is for csv and jsonl"):
        SourceSettings(file="/a", schema=SCHEMA)


def test_rejected_rows_reach_the_sinks_rejects_and_are_counted(tmp_path: Any) -> None:
    env = SinkEnv(LocalFileSystem(), str(tmp_path / "o"))
    sink = HDFS2FileSink(
        SinkSettings(
            file=env.out + "/p-%FILENUM.jsonl",
            format="jsonl",
            rejects_file="_rejects/r-%FILENUM.jsonl",
        ),
        env.fs,
    )
    sink.reset_to_initial_state()
    bad = Rejected("file:///in.csv", 12, "column 'id': 'x' is not a int64", "x,b")
    sink.write(Batch([{"id": 1}], rejected=[bad]))
    sink.finish()
    sink.checkpoint(1)
    sink.on_cut_completed(1)
    sink.close()
    (rejects,) = env.published(env.out + "/_rejects").values()
    line = json.loads(rejects)
    assert (line["file"], line["offset"], line["record"]) == ("file:///in.csv", 12, "x,b")
    assert sink.metrics.bad_records == 1
    assert env.published() == {"p-0.jsonl": b'{"id":1}\n'}


# -- property: a resume is at a row boundary ---------------------------------------------------

_VALUE = st.text(alphabet=st.sampled_from('ab,"\n\r é'), max_size=8)


@settings(max_examples=80, deadline=None)
@given(
    names=st.lists(_VALUE, min_size=1, max_size=25),
    chunk=st.integers(1, 40),
    batch=st.integers(1, 5),
    resume_after=st.lists(st.integers(0, 30), max_size=4),
    crlf=st.booleans(),
)
def test_resuming_from_any_checkpoint_reads_every_row_once_whole(
    tmp_path_factory: pytest.TempPathFactory,
    names: list[str],
    chunk: int,
    batch: int,
    resume_after: list[int],
    crlf: bool,
) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n" if crlf else "\n", quoting=csv.QUOTE_ALL)
    writer.writerow(["id", "name"])
    writer.writerows([i, n] for i, n in enumerate(names))
    path = tmp_path_factory.mktemp("rows") / "in.csv"
    path.write_bytes(out.getvalue().encode())
    schema = {"id": "int64", "name": "string"}
    source = HDFS2FileSource(
        SourceSettings(file=str(path), format="csv", schema=schema, read_chunk=chunk),
        LocalFileSystem(),
    )
    source.reset_to_initial_state()
    got: list[dict[str, Any]] = []
    steps = 0
    stops = set(resume_after)
    while (b := source.next_batch(batch)) is not None:
        got += b.records
        assert not b.rejected
        steps += 1
        if steps in stops:  # a checkpoint here, then a new process resumes from it
            source = rebuild(source, source.checkpoint(steps))
    expected = [{"id": i, "name": n if n != "" else None} for i, n in enumerate(names)]
    assert got == expected


# -- found by review: each once a defect ---------------------------------------------------


class _FailOnce:
    """The local filesystem, whose read at or after byte ``at`` fails once (a DataNode lost)."""

    def __init__(self, at: int) -> None:
        self._fs = LocalFileSystem()
        self._at = at
        self.failed = False

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset >= self._at and not self.failed:
            self.failed = True
            raise OSError("transient DataNode error")
        return self._fs.read(path, offset, length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def test_rows_rejected_before_a_failed_read_are_rejected_once_after_the_reset(
    tmp_path: Any,
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(csv_text([("x", "a", "2026-11-28"), (2, "b", "2026-11-28")]))
    fs = _FailOnce(at=20)
    source = HDFS2FileSource(
        SourceSettings(file=str(path), format="csv", schema=SCHEMA, read_chunk=16), fs
    )
    source.reset_to_initial_state()
    state = source.checkpoint(1)
    with pytest.raises(OSError, match="transient"):
        source.next_batch(100)  # the bad row is rejected, then a later read fails
    source.reset(state)  # the region resets to the cut
    batches = read_all(source)
    assert [r.text for b in batches for r in b.rejected] == ["x,a,2026-11-28"]
    assert [r["id"] for b in batches for r in b.records] == [2]


def test_a_header_longer_than_64_kib_is_found_again_on_a_resume(tmp_path: Any) -> None:
    wide = [f"c{i}" for i in range(12000)]
    data = (
        ",".join(["id", *wide])
        + "\n"
        + "\n".join(f"{i}," + "," * (len(wide) - 1) for i in range(3))
        + "\n"
    )
    path = tmp_path / "wide.csv"
    path.write_text(data)
    source = HDFS2FileSource(
        SourceSettings(file=str(path), format="csv", schema={"id": "int64"}, read_chunk=4096),
        LocalFileSystem(),
    )
    source.reset_to_initial_state()
    first = source.next_batch(1)
    assert first is not None and first.records == [{"id": 0}]
    resumed = rebuild(source, source.checkpoint(1))
    assert [r["id"] for b in read_all(resumed) for r in b.records] == [1, 2]


def test_a_quote_inside_an_unquoted_value_is_a_plain_character(tmp_path: Any) -> None:
    data = 'id,name,day\n1,5" screen,2026-11-28\n2,b,2026-11-28\n3,"c ""q""",2026-11-28\n'
    got = [r for b in read_all(source_of(tmp_path, data)) for r in b.records]
    assert [r["name"] for r in got] == ['5" screen', "b", 'c "q"']


def test_a_value_longer_than_pythons_csv_limit_is_read(tmp_path: Any) -> None:
    data = csv_text([(1, "v" * 200_000, "2026-11-28"), (2, "b", "2026-11-28")])
    got = [r for b in read_all(source_of(tmp_path, data)) for r in b.records]
    assert [len(r["name"]) for r in got] == [200_000, 1]


def test_a_header_that_does_not_decode_stops_naming_the_header(tmp_path: Any) -> None:
    data = b"id,na\xffme,day\n1,a,2026-11-28\n"
    with pytest.raises(BadRecordError, match=r"at byte 0: the header row is not utf-8"):
        read_all(source_of(tmp_path, data))


def test_blank_lines_are_no_rows(tmp_path: Any) -> None:
    data = "id,name,day\n\n1,a,2026-11-28\r\n\r\n2,b,2026-11-28\n\n"
    batches = read_all(source_of(tmp_path, data))
    assert [r["id"] for b in batches for r in b.records] == [1, 2]
    assert not [r for b in batches for r in b.rejected]
    jsonl = source_of(tmp_path, '{"id": 1}\n\n{"id": 2}\n', format="jsonl", schema=None)
    assert [r["id"] for b in read_all(jsonl) for r in b.records] == [1, 2]


def test_csv_refuses_encodings_that_hide_quotes_inside_characters() -> None:
    with pytest.raises(ValueError, match="may hold those bytes inside a character"):
        SourceSettings(file="/a", format="csv", schema=SCHEMA, encoding="cp932")
    SourceSettings(file="/a", format="csv", schema=SCHEMA, encoding="utf-8-sig")


# -- the block path: Arrow's reader where it reads as the row path does --------------------------

_TYPES = [
    "int64",
    "int32",
    "double",
    "float",
    "bool",
    "date",
    "timestamp",
    "decimal(10,2)",
    "string",
]
_VALUES = [
    "1", "+7", "-3", "007", " 7", "7 ", "\t7", "1.0", "1.5", "1e3", "nan", "inf", "-inf", "0x10",
    "1_0", "true", "True", "tRuE", "false", "0", "yes", "2026-11-28", "2026-1-28",
    "2026-11-28T00:00", "2026-11-28 00:00:00", "2026-11-28T00:00:00Z",
    "2026-11-28T00:00:00+01:00", "2026-11-28T00:00:00.123456", "2026-11-28T00:00:00.1234567",
    "1.234", "1.23", ".5", "5.", "9999999999999999999", "3.4e39", "x", "", "NULL", "é", "a b",
]  # fmt: skip
_VALUE = st.one_of(
    st.sampled_from(_VALUES), st.text(alphabet="0123456789+-.eE :TZ\tx", max_size=12)
)


#: Values each type reads (most of each row, so that whole blocks convert).
_VALID = {
    "int64": ["1", "+7", "-3", "007", " 7", "7 ", "\t7", "0", "9223372036854775807", ""],
    "int32": ["1", "-3", " 7", "2147483647", ""],
    "double": ["1.5", "1e3", "nan", "inf", "-inf", ".5", "5.", " 2.5", "1", ""],
    "float": ["1.5", "1e3", "nan", "-inf", " 2.5", "3.4e38", ""],
    "bool": ["true", "True", "TRUE", "false", "0", "1", ""],
    "date": ["2026-11-28", "2026-01-01", ""],
    "timestamp": ["2026-11-28T00:00", "2026-11-28 00:00:00", "2026-11-28T00:00:00.123456", ""],
    "decimal(10,2)": ["1.23", "1.2", "-0.5", ".5", " 7", "1", "12345678.91", ""],
    "string": ["x", "a b", " x ", "é", "", "NULL", "1.5"],
}


@settings(max_examples=80, deadline=None)
@given(
    data=st.data(),
    types=st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3),
    extra=st.sampled_from(["", "\n", '"', "\r", "1,2,3,4\n", "\r\n", "x\n"]),
    where=st.integers(0, 40),
    chunk=st.integers(1, 200),
    want=st.integers(1, 50),
    header=st.booleans(),
)
def test_the_block_path_reads_every_row_as_the_row_path_does(
    data: st.DataObject,
    types: list[str],
    extra: str,
    where: int,
    chunk: int,
    want: int,
    header: bool,
) -> None:
    """Blocks of rows go through Arrow's CSV reader at once; a block it would read otherwise
    (a value Arrow reads that the rule of types refuses, a quote, a lone CR) goes row by row.
    Either way every record, every rejected row and every offset are the row path's."""
    schema = {f"c{i}": t for i, t in enumerate(types)}
    names = list(schema)
    value = [st.sampled_from(_VALID[t] * 4 + _VALUES) | _VALUE for t in types]
    rows = data.draw(st.lists(st.tuples(*value), max_size=40))
    lines = [",".join(row) + "\n" for row in rows]
    lines.insert(min(where, len(lines)), extra)
    data = (",".join(names) + "\n" if header else "") + "".join(lines)
    raw = data.encode()

    def read(block_path: bool) -> tuple[str, list[Any], list[int]]:
        rows_ = Rows(
            "csv",
            encoding="utf-8",
            schema=schema,
            header=header,
            read_head=lambda path, length: raw[:length],
        )
        if not block_path:
            rows_._arrow = None  # the row-at-a-time path alone
        rows_.reading("in.csv", "in.csv")
        out: list[Any] = []
        sizes, offset = [], 0
        for start in range(0, len(raw), chunk):
            rows_.push(raw[start : start + chunk])
            while (taken := rows_.take(want, offset)) is not None:
                records, size = taken
                out.extend(records)
                offset += size
                sizes.append(size)
        if rows_.unfinished():
            records, size = rows_.take_unfinished(offset)
            out.extend(records)
            sizes.append(size)
        rejected = [(r.offset, r.reason, r.text) for r in rows_.take_rejected()]
        return repr(out), rejected, sizes

    assert read(block_path=True) == read(block_path=False)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), max_size=60),
    tail=st.binary(max_size=5).filter(lambda b: b"\n" not in b),
    start=st.integers(0, 20),
    want=st.integers(1, 70),
    span=st.integers(1, 2000),
)
def test_line_ends_are_found_span_by_span_as_by_listing_every_line(
    lengths: list[int], tail: bytes, start: int, want: int, span: int
) -> None:
    """The end of a block of whole lines is looked for a span of bytes at a time (far more
    lines than wanted, or fewer) and found exactly: it is always where listing the lines one
    by one puts it."""
    from operators.source import rows as rows_module

    buf = b"".join(b"x" * n + b"\n" for n in lengths) + tail
    start = min(start, len(buf))
    start = buf.find(b"\n", start) + 1 if buf.find(b"\n", start) >= 0 else len(buf)
    expected, at = [], start
    while len(expected) < want and (end := buf.find(b"\n", at)) >= 0:
        at = end + 1
        expected.append(at)
    found = rows_module._LineEnds.of(buf, start, want, span)
    assert len(found) == len(expected)
    if expected:
        assert found[-1] == expected[-1]
    assert list(found) == expected
