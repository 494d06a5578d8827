"""The line rule of operators.source.decoding through both engines' readers, without a JVM.

The in-process source (``HDFS2FileSource``, Python strings) and the Spark reader
(``arrow_io.read_lines``, Arrow arrays, run on the executors) must give the same records, the
same error and the same count of skipped lines for the same bytes.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.common.errors import BadRecordError
from operators.fs.local import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.source.decoding import EncodedLines, LineBlock, LineDecoder
from operators.spark.arrow_io import read_lines
from operators.spark.options import scan_config
from region.errors import ConfigError

FS = LocalFileSystem()


def in_process(path: Path, chunk: int, batch: int = 7, **settings: Any) -> tuple[list[str], int]:
    source = HDFS2FileSource(
        SourceSettings(file=str(path), read_chunk=chunk, **settings), FS, name="source"
    )
    source.reset_to_initial_state()
    out: list[str] = []
    while (got := source.next_batch(batch)) is not None:
        out += got.records
    return out, source.records_skipped


def on_spark(path: Path, chunk: int, cuts: list[int] | None = None, **kw: Any) -> list[str]:
    size = path.stat().st_size
    bounds = [0, *sorted({c for c in cuts or [] if 0 < c < size}), size]
    out: list[str] = []
    for start, end in itertools.pairwise(bounds):
        for batch in read_lines(FS, str(path), start, end, size=size, chunk_size=chunk, **kw):
            out += batch.column(0).to_pylist()
    return out


CASES = {
    "crlf": b"one\r\ntwo\r\n",
    "mixed": b"one\ntwo\r\nthree\n\r\n",
    "no final newline": b"one\ntwo",
    "final cr without newline": b"one\r\ntwo\r",
    "empty": b"",
    "only a newline": b"\n",
    "empty lines": b"\n\n\na\n\n",
    "lone cr inside": b"a\rb\nc\r\rd\n",
}


@pytest.mark.parametrize("name", CASES)
def test_both_readers_give_the_same_lines(tmp_path: Path, name: str) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(CASES[name])
    local, _ = in_process(path, chunk=3)
    assert local == on_spark(path, chunk=3) == on_spark(path, chunk=1 << 20, cuts=[1, 4])
    if name == "final cr without newline":
        assert local == ["one", "two\r"]  # a CR is a line end only before LF
    if name == "only a newline":
        assert local == [""]


BAD = b"good\nba\xffd\nbad \xc3\n\xe2\x82\nlast"


def test_replace_and_skip_are_the_same_on_both(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD)
    replaced, _ = in_process(path, chunk=4, on_decode_error="replace")
    assert replaced == on_spark(path, chunk=4, on_decode_error="replace")
    assert replaced == ["good", "ba\ufffdd", "bad \ufffd", "\ufffd", "last"]
    with caplog.at_level(logging.WARNING, logger="operators.source.decoding"):
        kept, skipped = in_process(path, chunk=4, on_decode_error="skip")
        local_log = caplog.text
        caplog.clear()
        assert kept == on_spark(path, chunk=4, on_decode_error="skip") == ["good", "last"]
    assert skipped == 3
    assert local_log == caplog.text  # one wording, naming the file and each line's offset
    assert "bad.txt, skipped the line at byte offset 5, not valid utf-8" in local_log.replace(
        ":", ","
    )


def test_fail_raises_the_same_error_on_both(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD)
    with pytest.raises(BadRecordError) as local:
        in_process(path, chunk=1 << 20)
    with pytest.raises(BadRecordError) as spark:
        on_spark(path, chunk=1 << 20)
    assert str(local.value) == str(spark.value)
    assert (local.value.file, local.value.offset) == (spark.value.file, spark.value.offset)
    assert local.value.offset == 5
    assert str(local.value).startswith(f"file file://{path}: the line at byte offset 5 is not")
    assert "at byte 7" in str(local.value) and "on_decode_error = 'replace'" in str(local.value)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le"])
def test_encodings_without_a_one_byte_lf_are_refused_alike(encoding: str) -> None:
    message = f"encoding {encoding!r} cannot be read in line mode"
    with pytest.raises(ValidationError, match=message):
        SourceSettings(file="/x", encoding=encoding)
    with pytest.raises(ConfigError, match=message):
        scan_config({"directory": "/x", "encoding": encoding})


def test_latin1_is_the_same_on_both(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes("caf\xe9\r\nna\xefve\n\xff".encode("latin-1"))
    local, _ = in_process(path, chunk=3, encoding="latin-1")
    assert local == on_spark(path, chunk=3, encoding="latin-1") == ["café", "naïve", "ÿ"]


_line = st.lists(st.sampled_from([b"a", b"\xc3\xa9", b"\xff", b"\xc3", b"\r", b" "]), max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_line.map(b"".join), max_size=10),
    final_lf=st.booleans(),
    chunk=st.integers(1, 24),
    batch=st.integers(1, 5),
    cuts=st.lists(st.integers(0, 80), max_size=3),
    policy=st.sampled_from(["replace", "skip"]),
)
def test_both_readers_agree_on_random_bytes(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    final_lf: bool,
    chunk: int,
    batch: int,
    cuts: list[int],
    policy: str,
) -> None:
    path = tmp_path_factory.mktemp("d") / "f.txt"
    path.write_bytes(b"\n".join(lines) + (b"\n" if final_lf and lines else b""))
    local, _ = in_process(path, chunk, batch, on_decode_error=policy)
    assert local == on_spark(path, chunk, cuts, on_decode_error=policy)


def test_the_decoder_counts_and_names_what_it_skips() -> None:
    decoder = LineDecoder("utf-8", "skip")
    decoder.reading("/in/f.txt", "hdfs://nn/in/f.txt")
    out, kept = decoder.decode_lines([b"ok", b"\xff", b"fine"], [0, 3, 5])
    assert (out, kept, decoder.skipped) == (["ok", "fine"], [0, 2], 1)
    failing = LineDecoder("utf-8", "fail")
    failing.reading("/in/f.txt", "hdfs://nn/in/f.txt")
    with pytest.raises(BadRecordError, match=r"hdfs://nn/in/f.txt: the line at byte offset 3"):
        failing.decode_lines([b"ok", b"\xff"], [0, 3])


def test_a_byte_order_mark_encoding_reads_lines_without_the_mark(tmp_path: Path) -> None:
    """utf-8-sig was refused ('LF is not one byte'), so a BOM could not be dropped."""
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffone\r\ntwo\n".encode())
    local, _ = in_process(path, chunk=3, encoding="utf-8-sig")
    assert local == on_spark(path, chunk=3, encoding="utf-8-sig") == ["one", "two"]


# -- lines as bytes: a sink in the source's encoding, nothing between them -------------------


def through_sink(
    out: Path, path: Path, chunk: int, *, encoded: bool, sink: dict[str, Any], **source: Any
) -> tuple[list[bytes], int]:
    """``path`` read by the source and written by a sink in ``out`` (published by one cut):
    with ``encoded``, the source hands the sink its lines as bytes. The published files in
    order, and the lines skipped."""
    writer = HDFS2FileSink(SinkSettings(file=str(out / "part-%FILENUM.txt"), **sink), FS)
    reader = HDFS2FileSource(
        SourceSettings(file=str(path), read_chunk=chunk, **source),
        FS,
        encoded_for=writer.line_encoding if encoded else None,
    )
    reader.reset_to_initial_state()
    writer.reset_to_initial_state()
    while (got := reader.next_batch(5)) is not None:
        assert isinstance(got.records, EncodedLines | LineBlock) == encoded
        writer.write(got)
    writer.finish()
    writer.checkpoint(1)
    writer.on_cut_completed(1)
    files = sorted(out.glob("part-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    return [p.read_bytes() for p in files], reader.records_skipped


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.lists(
            st.sampled_from([b"a", b"\r", b"\xc3\xa9", b"\xe2\x82\xac", b"\xff", b"\xc3"]),
            max_size=6,
        ).map(b"".join),
        max_size=12,
    ),
    final_lf=st.booleans(),
    chunk=st.sampled_from([3, 7, 64, 1 << 20]),
    policy=st.sampled_from(["replace", "skip"]),
    sink=st.sampled_from([{}, {"bytes_per_file": 9}, {"tuples_per_file": 2}]),
)
def test_lines_as_bytes_write_what_decoded_lines_write(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    final_lf: bool,
    chunk: int,
    policy: str,
    sink: dict[str, Any],
) -> None:
    """The same files, rolled at the same records, the same replacements and skips."""
    folder = tmp_path_factory.mktemp("d")
    path = folder / "f.txt"
    path.write_bytes(b"\n".join(lines) + (b"\n" if final_lf and lines else b""))
    kw = {"on_decode_error": policy, "sink": sink}
    as_text = through_sink(folder / "text", path, chunk, encoded=False, **kw)
    as_bytes = through_sink(folder / "bytes", path, chunk, encoded=True, **kw)
    assert as_bytes == as_text


@pytest.mark.parametrize("chunk", [4, 1 << 20])
def test_lines_as_bytes_still_fail_on_a_bad_byte_naming_file_and_offset(
    tmp_path: Path, chunk: int
) -> None:
    """No transform needs the text, but an invalid byte under 'fail' still stops the job."""
    path = tmp_path / "bad.txt"
    path.write_bytes("é\n".encode() * 1000 + BAD)
    with pytest.raises(BadRecordError) as as_text:
        through_sink(tmp_path / "text", path, chunk, encoded=False, sink={})
    with pytest.raises(BadRecordError) as as_bytes:
        through_sink(tmp_path / "bytes", path, chunk, encoded=True, sink={})
    assert str(as_bytes.value) == str(as_text.value)
    assert (as_bytes.value.file, as_bytes.value.offset) == (str(path), 3000 + 5)


def test_a_replacement_ascii_cannot_hold_is_reported_by_the_sink(tmp_path: Path) -> None:
    """ASCII with 'replace': U+FFFD has no ASCII bytes, so the sink skips that line (logged),
    as it does for the decoded line."""
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\nb\xffd\nlast\n")
    kw: dict[str, Any] = {"encoding": "ascii", "on_decode_error": "replace"}
    sink = {"encoding": "ascii", "on_bad_record": "skip"}
    as_text = through_sink(tmp_path / "text", path, 64, encoded=False, sink=sink, **kw)
    as_bytes = through_sink(tmp_path / "bytes", path, 64, encoded=True, sink=sink, **kw)
    assert as_bytes == as_text == ([b"ok\nlast\n"], 0)


@pytest.mark.parametrize(
    ("source", "sink"),
    [("utf-8-sig", "utf-8-sig"), ("latin-1", "latin-1"), ("utf-8", "ascii")],
)
def test_lines_are_decoded_unless_the_sink_writes_the_same_encoding_without_a_mark(
    tmp_path: Path, source: str, sink: str
) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"one\n")
    writer = HDFS2FileSink(SinkSettings(file=str(tmp_path / "o" / "p.txt"), encoding=sink), FS)
    reader = HDFS2FileSource(
        SourceSettings(file=str(path), encoding=source), FS, encoded_for=writer.line_encoding
    )
    reader.reset_to_initial_state()
    batch = reader.next_batch(5)
    assert batch is not None and batch.records == ["one"]
    assert not isinstance(batch.records, EncodedLines)


def line_ends(data: bytes, policy: str) -> set[tuple[int, int]]:
    """Every (records emitted, offset) a source may be at after a batch: the offset after
    each line, with the records up to it (a line that does not decode is none under skip)."""
    pairs = {(0, 0)}
    kept = pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end + 1
        line = data[pos:end].removesuffix(b"\n")
        try:
            line.decode()
        except UnicodeDecodeError:
            kept += policy == "replace"
        else:
            kept += 1
        pairs.add((kept, end))
        pos = end
    return pairs


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(
        st.lists(st.sampled_from([b"a", b"bc", b"\r", b"\xc3\xa9", b"\xff"]), max_size=5).map(
            b"".join
        ),
        max_size=16,
    ),
    final_lf=st.booleans(),
    chunk=st.sampled_from([1, 3, 8, 64, 1 << 20]),
    wants=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    restarts=st.sets(st.integers(0, 24), max_size=3),
    policy=st.sampled_from(["replace", "skip"]),
)
def test_line_blocks_keep_the_accounting_of_decoded_lines(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    final_lf: bool,
    chunk: int,
    wants: list[int],
    restarts: set[int],
    policy: str,
) -> None:
    """Lines passed as blocks of bytes (no transform) count as decoded lines do: after every
    batch the offset is the end of a line and the records are those up to it, each batch's
    size is the bytes it moved the offset by, and a restart from any batch's checkpoint reads
    every line once: the records, in order, are the decoded path's, encoded."""
    path = tmp_path_factory.mktemp("blocks") / "f.txt"
    data = b"\n".join(lines) + (b"\n" if final_lf and lines else b"")
    path.write_bytes(data)
    settings_ = SourceSettings(file=str(path), read_chunk=chunk, on_decode_error=policy)
    decoded, _ = in_process(path, chunk, on_decode_error=policy)
    allowed = line_ends(data, policy)

    def source() -> HDFS2FileSource:
        return HDFS2FileSource(settings_, FS, encoded_for="utf-8")

    reader = source()
    reader.reset_to_initial_state()
    out: list[Any] = []
    batches = 0
    while (got := reader.next_batch(wants[batches % len(wants)])) is not None:
        before = reader.offset - (got.size or 0)
        assert len(got.records) <= wants[batches % len(wants)]
        if isinstance(got.records, LineBlock):
            assert got.records.data == b"".join(line + b"\n" for line in got.records)
        out += got.records
        assert (len(out), reader.offset) in allowed
        assert before >= 0 and (got.size or 0) >= 0
        batches += 1
        if batches in restarts:  # a new process from this batch's cut
            state = reader.checkpoint(batches)
            reader = source()
            reader.reset(state)
    assert [r if isinstance(r, bytes) else r.encode() for r in out] == [r.encode() for r in decoded]
