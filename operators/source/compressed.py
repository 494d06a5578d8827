"""Compressed input: a gzip, bzip2, zstd or LZ4 file reads as its decompressed bytes.

:class:`Decompressed` is the file source's view of its filesystem. A file whose codec is known
(``[source] compression``: by the name's extension under ``"auto"``, as Hadoop's codec factory
does: ``.gz``, ``.bz2``, ``.zst``, ``.lz4``; or one codec for every file) is its decompressed
bytes: ``read(path, offset, length)`` takes them from offset ``offset`` of the decompressed
stream and ``status(path).size`` is their count. So everything the source decides by bytes
(the offset in its state, the resume, the head and content checks, a last line without line
end) holds for compressed files as it does for plain ones, in decompressed bytes.

The streams have no index: a read is served by one decompression running forwards per file,
kept between reads, with the file's first 64 KiB kept aside (the source reads them again to
check a file is the one it read). A read before the stream's position, and a resume at
offset N after a restart, decompress again from the start (what Hadoop does for codecs that
cannot split). The size is counted by one decompression of the whole file when the file is
first seen, and kept while its raw size, mtime and identity stay.

A stream that ends early (a file still being written) reads as what decompressed before the
piece (1 MiB) that met its end; its size grows as the file does. A file that is not what its
codec says is an ``OSError`` naming it (one replaced under its name mid-read is retried).
Concatenated gzip members, bzip2 streams and zstd frames read as one stream. ``.lz4`` is the
LZ4 frame format (the ``lz4`` tool's); Hadoop's block-framed Lz4Codec files are refused with a
message saying so.
"""

from __future__ import annotations

import io
import logging
import posixpath
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal

from operators.common.lazy import lazy_module
from region.errors import permanent
from region.fs import FileStatus, FileSystem, ForwardReader

if TYPE_CHECKING:
    import pyarrow as pa
else:
    pa = lazy_module("pyarrow")


__all__ = ["CODECS", "Compression", "Decompressed", "codec_of", "range_stream"]

logger = logging.getLogger(__name__)

Compression = Literal["auto", "none", "gzip", "bz2", "zstd", "lz4"]
#: Extensions read as compressed under ``"auto"`` (Hadoop's codec factory's).
CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd", ".lz4": "lz4"}
_HEAD = 1 << 16
_PIECE = 1 << 20
_SIZES = 1024
_LZ4_FRAME = b"\x04\x22\x4d\x18"


def codec_of(path: str, compression: Compression) -> str | None:
    """The codec of the file ``path`` under the setting ``compression``."""
    if compression == "none":
        return None
    if compression != "auto":
        return compression
    return CODECS.get(posixpath.splitext(path)[1].lower())


def _identity(status: FileStatus) -> tuple[int, int, int | None]:
    return (status.mtime_ns, status.size, status.file_id)


def _arrow_codec(fs: FileSystem, path: str, codec: str) -> str:
    """pyarrow's name of ``codec``, once the file's first bytes agree with it."""
    if codec == "lz4":
        raw = fs.read(path, 0, 4)
        if raw and raw != _LZ4_FRAME[: len(raw)]:
            msg = (
                f"{fs.display(path)} is not an LZ4 frame (the lz4 tool's format): Hadoop's "
                "block-framed Lz4Codec files are not read yet; decompress it, or name the codec "
                "with [source] compression"
            )
            raise permanent(OSError(msg))
        return "lz4_frame"
    return codec


class _Prefix(io.RawIOBase):
    """The first ``end`` bytes of a file, read forwards (``chunk`` bytes a read at most)."""

    def __init__(self, fs: FileSystem, path: str, end: int, chunk: int) -> None:
        self._fs, self._path, self._end, self._chunk = fs, path, end, chunk
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._chunk, self._end - self.pos)
        if want <= 0:
            return 0
        data = self._fs.read(self._path, self.pos, want)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def range_stream(
    fs: FileSystem, path: str, codec: str, end: int, chunk: int = 8 << 20
) -> pa.CompressedInputStream:
    """The decompressed stream of the first ``end`` raw bytes of ``path``: a file read as it was
    when its size was ``end`` (bytes appended since are not read), for a reader that must read
    the same bytes again after a crash (the Spark tasks, :mod:`operators.spark.rows_io`)."""
    return pa.CompressedInputStream(
        pa.PythonFile(_Prefix(fs, path, end, chunk), mode="r"), _arrow_codec(fs, path, codec)
    )


class _Stream:
    """One decompression of one file, running forwards."""

    def __init__(self, fs: FileSystem, path: str, codec: str, identity: Any) -> None:
        self._fs = fs
        self.identity = identity
        self.codec = codec
        self._path = path
        self._display = fs.display(path)
        self._stream = pa.CompressedInputStream(
            pa.PythonFile(ForwardReader(fs, path), mode="r"), _arrow_codec(fs, path, codec)
        )
        self.pos = 0
        self.ended = False
        self.head = b""

    def read(self, n: int) -> bytes:
        """Up to ``n`` more decompressed bytes (fewer only at the end of the stream)."""
        out: list[bytes] = []
        got = 0
        while got < n and not self.ended:
            try:
                piece = self._stream.read(min(_PIECE, n - got))
            except OSError as exc:
                if "Truncated" in str(exc):
                    self.ended = True  # still being written: what decompressed so far
                    break
                if self._replaced():
                    # Another file under the name mid-read (reads go by name): not a verdict
                    # on either file; the source's checks meet the new one after the reset.
                    msg = f"{self._display} was replaced while it was decompressed"
                    raise OSError(msg) from None
                msg = f"{self._display} is not a whole {self.codec} stream: {exc}"
                raise permanent(OSError(msg)) from None
            if not piece:
                self.ended = True
                break
            out.append(piece)
            got += len(piece)
        data = b"".join(out)
        if len(self.head) < _HEAD and self.pos < _HEAD:
            self.head += data[: _HEAD - self.pos]
        self.pos += len(data)
        return data

    def _replaced(self) -> bool:
        try:
            now = _identity(self._fs.status(self._path))
        except FileNotFoundError:
            return True
        return bool(now != self.identity)

    def skip_to(self, offset: int) -> None:
        while self.pos < offset and not self.ended:
            self.read(min(8 << 20, offset - self.pos))


class Decompressed:
    """The source's view of a filesystem in which compressed files read decompressed (see
    the module doc). Every other call goes to the filesystem as it is."""

    def __init__(self, fs: FileSystem, compression: Compression) -> None:
        self._fs = fs
        self._compression = compression
        self._lock = threading.Lock()  # the read-ahead reads from another thread
        self._streams: dict[str, _Stream] = {}
        self._sizes: OrderedDict[tuple[str, Any], int] = OrderedDict()
        self._whole: dict[str, tuple[int, int, int | None]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    @property
    def inner(self) -> FileSystem:
        return self._fs

    def codec(self, path: str) -> str | None:
        return codec_of(path, self._compression)

    def status(self, path: str) -> FileStatus:
        status = self._fs.status(path)
        codec = self.codec(path)
        if codec is None or status.is_dir:
            return status
        with self._lock:
            size = self._size(path, status, codec)
        return status._replace(size=size)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        codec = self.codec(path)
        if codec is None:
            return self._fs.read(path, offset, length)
        status = self._fs.status(path)
        with self._lock:
            stream = self._stream(path, status, codec)
            want = length if length >= 0 else 1 << 62
            end = offset + want
            whole = stream.ended and stream.pos <= _HEAD
            if offset < stream.pos and (end <= len(stream.head) or whole):
                return stream.head[offset:end]  # 1. the start, kept aside
            if offset < stream.pos:  # 2. behind the stream: decompress again
                logger.debug("decompressing %s again from its start", self._fs.display(path))
                stream = self._new(path, status, codec)
            stream.skip_to(offset)  # 3. forwards to the offset, then the bytes asked for
            if stream.pos < offset:
                return b""
            data = stream.read(want)
            if stream.ended:
                self._sizes[(path, stream.identity)] = stream.pos
                self._whole[path] = stream.identity
            return data

    def read_whole(self, path: str) -> tuple[int, int, int | None] | None:
        """``(mtime_ns, raw size, file id)`` of the file ``path`` as it was when its
        decompression last reached its end, or ``None``; asked once per file read."""
        with self._lock:
            return self._whole.pop(path, None)

    def _stream(self, path: str, status: FileStatus, codec: str) -> _Stream:
        stream = self._streams.get(path)
        if stream is None or stream.identity != _identity(status) or stream.codec != codec:
            stream = self._new(path, status, codec)
        return stream

    def _new(self, path: str, status: FileStatus, codec: str) -> _Stream:
        stream = _Stream(self._fs, path, codec, _identity(status))
        self._streams[path] = stream
        if len(self._streams) > 8:  # files read at once: the current one and a few more
            del self._streams[next(iter(self._streams))]
        return stream

    def _size(self, path: str, status: FileStatus, codec: str) -> int:
        key = (path, _identity(status))
        size = self._sizes.get(key)
        if size is None:
            counting = _Stream(self._fs, path, codec, key[1])
            counting.skip_to(1 << 62)  # to its end
            size = counting.pos
            self._sizes[key] = size
            if len(self._sizes) > _SIZES:
                self._sizes.popitem(last=False)
        return size
