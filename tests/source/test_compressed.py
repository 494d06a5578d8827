"""Compressed input read as its decompressed bytes, by extension: every record once through
resumes at any checkpoint, a stream still being written read as far as it decompresses, and a
file that is not what its name says stopped with its name."""

from __future__ import annotations

import bz2
import gzip
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.fs.local import LocalFileSystem
from operators.source import HDFS2FileSource, SourceSettings
from operators.source.compressed import Decompressed
from region.errors import ConfigError
from tests.source.test_source import read_all, rebuild


def compress(codec: str, data: bytes, pieces: int = 1) -> bytes:
    """``data`` in ``pieces`` members / streams / frames, as concatenating tools write them."""
    step = max(1, len(data) // pieces)
    chunks = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
    if codec == "gzip":
        return b"".join(gzip.compress(c, mtime=0) for c in chunks)
    if codec == "bz2":
        return b"".join(bz2.compress(c) for c in chunks)
    if codec == "zstd":
        return b"".join(pa.compress(c, codec="zstd", asbytes=True) for c in chunks)
    done = subprocess.run(["lz4", "-q", "-c"], input=data, capture_output=True, check=True)
    return done.stdout


EXTENSIONS = {"gzip": ".gz", "bz2": ".bz2", "zstd": ".zst", "lz4": ".lz4"}


def source_of(path: Path, **given: Any) -> HDFS2FileSource:
    source = HDFS2FileSource(SourceSettings(file=str(path), **given), LocalFileSystem())
    source.reset_to_initial_state()
    return source


@pytest.mark.parametrize("codec", list(EXTENSIONS))
def test_each_codec_reads_as_its_lines_by_the_files_extension(tmp_path: Path, codec: str) -> None:
    lines = [f"line {i} " + "x" * (i % 50) for i in range(3000)]
    path = tmp_path / f"in.txt{EXTENSIONS[codec]}"
    path.write_bytes(compress(codec, "\n".join(lines).encode(), pieces=3))
    got = [r for b in read_all(source_of(path, read_chunk=4096)) for r in b.records]
    assert got == lines  # the last line has no line end: it is read too


def test_compression_none_reads_the_bytes_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "in.bin.gz"
    raw = gzip.compress(b"a\nb\n", mtime=0)
    path.write_bytes(raw)
    got = b"".join(
        r for b in read_all(source_of(path, format="binary", compression="none")) for r in b.records
    )
    assert got == raw


def test_a_named_codec_reads_every_file_whatever_its_name(tmp_path: Path) -> None:
    path = tmp_path / "export.dat"
    path.write_bytes(compress("zstd", b"1\n2\n"))
    got = [r for b in read_all(source_of(path, compression="zstd")) for r in b.records]
    assert got == ["1", "2"]


def test_a_file_that_is_not_its_codec_stops_the_run_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "in.txt.gz"
    path.write_bytes(b"plain text, not gzip\n" * 10)
    with pytest.raises(OSError, match=r"in\.txt\.gz is not a whole gzip stream"):
        read_all(source_of(path))
    hadoop = tmp_path / "in.txt.lz4"
    hadoop.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x06xxxxxx")
    with pytest.raises(OSError, match="Hadoop's block-framed Lz4Codec"):
        read_all(source_of(hadoop))


def test_a_stream_still_being_written_reads_as_far_as_it_decompresses(tmp_path: Path) -> None:
    data = b"".join(b"%05d\n" % i for i in range(20000))
    whole = compress("gzip", data, pieces=4)
    path = tmp_path / "growing.gz"
    path.write_bytes(whole[: len(whole) * 3 // 4])
    view = Decompressed(LocalFileSystem(), "auto")
    part = view.read(str(path))
    assert 0 < len(part) < len(data) and data.startswith(part)
    assert view.status(str(path)).size == len(part)
    path.write_bytes(whole)  # the writer finished
    assert view.status(str(path)).size == len(data)
    assert view.read(str(path), len(part)) == data[len(part) :]


def test_reads_behind_the_stream_and_at_its_start_give_the_same_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * 2000
    path = tmp_path / "x.bin.zst"
    path.write_bytes(compress("zstd", data, pieces=5))
    view = Decompressed(LocalFileSystem(), "auto")
    p = str(path)
    assert view.read(p, 300_000, 1000) == data[300_000:301_000]
    assert view.read(p, 0, 4096) == data[:4096]  # the start, kept aside
    assert view.read(p, 100, 50_000) == data[100:50_100]  # behind: decompressed again
    assert view.read(p, 400_000, -1) == data[400_000:]


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="ab é\r", max_size=30), min_size=1, max_size=60),
    codec=st.sampled_from(["gzip", "bz2", "zstd"]),
    pieces=st.integers(1, 4),
    chunk=st.integers(1, 64),
    batch=st.integers(1, 7),
    resume_after=st.lists(st.integers(1, 40), max_size=4),
)
def test_resuming_from_any_checkpoint_inside_a_compressed_file_reads_each_line_once(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    codec: str,
    pieces: int,
    chunk: int,
    batch: int,
    resume_after: list[int],
) -> None:
    path = tmp_path_factory.mktemp("z") / f"in.txt{EXTENSIONS[codec]}"
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(compress(codec, data, pieces))
    source = source_of(path, read_chunk=chunk)
    got: list[str] = []
    steps = 0
    while (b := source.next_batch(batch)) is not None:
        got += b.records
        steps += 1
        if steps in resume_after:  # a checkpoint here, then a new process resumes from it
            source = rebuild(source, source.checkpoint(steps))
    assert got == [line.removesuffix("\r") for line in lines]


def test_a_file_replaced_while_it_is_decompressed_is_retried_not_condemned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.source import compressed
    from region.errors import is_permanent

    path = tmp_path / "s.csv.gz"
    rng = __import__("random").Random(3)
    first = "".join(f"{rng.random()}\n" for _ in range(200_000)).encode()
    path.write_bytes(compress("gzip", first))
    other = tmp_path / "other.gz"
    other.write_bytes(compress("gzip", b"".join(b"%d other\n" % i for i in range(300_000))))
    real = compressed.ForwardReader.readinto
    swapped: list[bool] = []

    def swap_after_the_first_read(self: Any, buffer: Any) -> int:
        got = real(self, buffer)
        if not swapped:
            swapped.append(True)
            other.replace(path)  # a new file moved over the name mid-read
        return got

    monkeypatch.setattr(compressed.ForwardReader, "readinto", swap_after_the_first_read)
    view = Decompressed(LocalFileSystem(), "auto")
    with pytest.raises(OSError, match="replaced while it was decompressed") as caught:
        view.read(str(path), 0, 4 << 20)
        view.read(str(path), 4 << 20, 4 << 20)
    assert not is_permanent(caught.value)


def test_a_checkpoint_mid_file_refuses_another_compression_setting(tmp_path: Path) -> None:
    path = tmp_path / "in.txt.gz"
    path.write_bytes(compress("gzip", b"".join(b"%d\n" % i for i in range(100))))
    raw = source_of(path, compression="none", format="binary", block_size=16)
    assert raw.next_batch(1) is not None
    state = raw.checkpoint(1)  # 16 bytes into the file as it is (an earlier release's reading)
    decompressing = HDFS2FileSource(SourceSettings(file=str(path)), LocalFileSystem())
    with pytest.raises(
        ConfigError,
        match=r"read as it is, and \[source\] compression now reads "
        r"it decompressed as gzip: set \[source\] compression = 'none'",
    ):
        decompressing.reset(state)
    auto = source_of(path, read_chunk=64)
    assert auto.next_batch(3) is not None
    again = HDFS2FileSource(SourceSettings(file=str(path)), LocalFileSystem())
    again.reset(auto.checkpoint(1))  # the same setting: it resumes
    assert next(r for b in read_all(again) for r in b.records) == "3"
