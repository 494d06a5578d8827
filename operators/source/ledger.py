"""What a source read, remembered by content: where a file listed again continues.

One rule for every engine (``on_modified = "continue"``):

1. A file read to byte ``L`` is remembered under its path: ``L``, the CRC-32 of its first
   ``min(L, HEAD)`` bytes (the *head*) and of the ``min(L, EDGE)`` bytes before ``L`` (the
   *edge*), and when it was read.
2. A file, under any path, whose first ``L`` bytes are the ``L`` bytes read before **continues at
   L**: appended to, written anew with the same leading content (a cumulative export), renamed,
   or replaced by a copy. Only the bytes after ``L`` are new records.
3. Any other content under a path read before is **new**: read from byte 0 (written over,
   truncated and written again, another export moved over the name).
4. A file's identity (inode, HDFS fileId) decides nothing: ext4 hands a freed inode out again at
   once, and a rename keeps it.

Another path's memory is taken only when that path no longer holds what was read there (it
vanished, or its head or edge changed, or it is shorter): a rotation by rename (``svc.log`` ->
``svc.log.1``) or the copy of a copytruncate (``app.log`` -> ``app.log.1``, then ``app.log``
truncated). Two paths that hold the same bytes at once are two files, each read.

**What is compared, and how it could be fooled.** The head and the edge, two reads of at most
4 KiB each, whatever the file's size: an append to a 10 GB log costs what the appended bytes
cost. A file whose first ``L`` bytes differ from those read only *between* its first and last
4 KiB before ``L`` (same length or longer, same head, same bytes at the boundary) is taken to
continue at ``L``: a rewrite that keeps both ends of what was read and changes its middle.

**The exact check** (``content_check = "exact"``): the edge is all ``L`` bytes read (its CRC-32
computed as they are read, :func:`prefix_crc`), so only a file whose first ``L`` bytes are
those bytes continues (up to a CRC-32 collision, one in 2**32 for a changed file). It costs a
read of the file's first ``L`` bytes each time a file read before is listed changed, in
chunks of ``_EXACT_CHUNK`` bytes: an append to a 10 GB log re-reads 10 GB. A read remembered
under one check is compared by what it holds under the other, so the setting may change
between runs.

**Bounded.** ``keep_files`` paths at most, each for ``keep_for`` seconds after it was last read;
what falls out is counted (``forgotten``) and logged, and a file listed again after its path was
forgotten is read whole, as new.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import zlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = [
    "EDGE",
    "HEAD",
    "Continuation",
    "Expected",
    "FileMoved",
    "Read",
    "ReadLedger",
    "exact_fingerprint",
    "expected_read",
    "fingerprint",
    "holds",
    "may_grow",
    "prefix_crc",
    "verify",
]

logger = logging.getLogger(__name__)

#: Leading bytes compared (the head) and bytes compared before the end of what was read.
HEAD = 4096
EDGE = 4096
#: The exact check reads a file's first bytes in chunks this long.
_EXACT_CHUNK = 8 << 20


class Read(NamedTuple):
    """What was read of one file: ``length`` bytes; the CRC-32 of the first ``head_len`` and of
    the ``edge_len`` bytes before ``length``; ``at``: when, in seconds since the epoch."""

    length: int
    head_len: int
    head_crc: int
    edge_len: int
    edge_crc: int
    at: float


class Continuation(NamedTuple):
    """Where a file continues: ``offset`` (0: it is new), and the path whose memory it took
    (``None``: its own, or none)."""

    offset: int
    taken_from: str | None


#: Reads per chunk of the encoded state (see ``ReadLedger.state``).
_CHUNK = 1024

#: Joins a path and what was read there before its file was new content (kept aside).
_ASIDE = "\x00"


#: Reads ``length`` bytes of ``path`` at ``offset`` (fewer at its end); raises
#: ``FileNotFoundError`` for a path that is gone.
ReadRange = Callable[[str, int, int], bytes]


def fingerprint(head: bytes, edge: bytes, length: int, at: float) -> Read:
    """The :class:`Read` of a file read to ``length``, given its first bytes (at least
    ``min(length, HEAD)`` of them) and the bytes just before ``length`` (at most ``EDGE``)."""
    head = head[: min(length, HEAD)]
    edge = edge[-min(length, EDGE) :] if length else b""
    return Read(length, len(head), zlib.crc32(head), len(edge), zlib.crc32(edge), at)


def exact_fingerprint(head: bytes, length: int, crc: int, at: float) -> Read:
    """The :class:`Read` of the exact check: the edge is all ``length`` bytes, whose CRC-32 is
    ``crc`` (:func:`prefix_crc`)."""
    head = head[: min(length, HEAD)]
    return Read(length, len(head), zlib.crc32(head), length, crc, at)


def prefix_crc(path: str, length: int, read: ReadRange, since: Read | None = None) -> int | None:
    """The CRC-32 of the first ``length`` bytes of ``path``, read in chunks; from ``since`` on
    when it is an exact read of at most ``length`` bytes of the same file (what a file read
    on costs is then what grew). ``None`` when the file is shorter than ``length``."""
    if since is not None and since.edge_len == since.length <= length:
        return _crc_of(path, since.length, length, read, since.edge_crc)
    return _crc_of(path, 0, length, read)


def _crc_of(path: str, start: int, end: int, read: ReadRange, crc: int = 0) -> int | None:
    """``crc`` run on over the bytes ``[start, end)`` of ``path``, read in chunks; ``None``
    when the file ends before ``end``."""
    pos = start
    while pos < end:
        data = read(path, pos, min(_EXACT_CHUNK, end - pos))
        if not data:
            return None
        crc = zlib.crc32(data, crc)
        pos += len(data)
    return crc


def may_grow(mtime_ns: int, now_ns: int, hold_ns: int, *, mtime_current: bool) -> bool:
    """Whether a file whose last line has no newline may still be written to, so that line is
    held (``hold_partial_line``): it changed within ``hold_ns`` of ``now_ns`` (an mtime ahead
    counts as now), or its filesystem does not keep mtimes current (``mtime_current``: HDFS
    sets them at close). One rule for every engine's reader."""
    return not mtime_current or now_ns - mtime_ns < hold_ns


def holds(path: str, earlier: Read, read: ReadRange) -> bool:
    """Whether the file at ``path`` still begins with what ``earlier`` read (head and edge
    compared; ``False`` for a path that is gone or shorter)."""
    try:
        head = read(path, 0, HEAD)
    except FileNotFoundError:
        return False
    # The size is unknown here: a shorter file fails the edge's read.
    return ReadLedger._holds(path, earlier.length, earlier, head, read)


class ReadLedger:
    """The files read, by path (see the module's docstring). State: :meth:`state` /
    :meth:`restore`, plain values."""

    def __init__(self, *, keep_files: int, keep_for: float) -> None:
        if keep_files < 1:
            raise ValueError(f"keep_files must be >= 1, got {keep_files}")
        self.keep_files = keep_files
        self.keep_for = keep_for
        self._reads: dict[str, Read] = {}  # in the order remembered: the oldest first
        # The paths by (head_len, head_crc), and how many reads have each head_len: a file is
        # compared with the reads whose head it begins with, not with every read.
        self._by_head: dict[tuple[int, int], set[str]] = {}
        self._head_lengths: collections.Counter[int] = collections.Counter()
        self.forgotten = 0
        # The state is encoded in chunks of at most _CHUNK reads, in the order remembered, each
        # once per change: a cut that remembers one file encodes the newest chunk, not every
        # read (100,000 reads took 0.4 s to encode whole).
        self._chunk_of: dict[str, int] = {}
        self._chunks: dict[int, dict[str, None]] = {}  # chunk -> its paths, oldest first
        self._texts: dict[int, str] = {}  # chunk -> its encoding, while it is unchanged
        self._next_chunk = 0

    def __len__(self) -> int:
        return len(self._reads)

    def __contains__(self, path: object) -> bool:
        return path in self._reads

    def get(self, path: str) -> Read | None:
        return self._reads.get(path)

    def _put(self, path: str, read: Read, *, chunk: int | None = None) -> None:
        self._drop(path)
        self._reads[path] = read
        self._by_head.setdefault((read.head_len, read.head_crc), set()).add(path)
        self._head_lengths[read.head_len] += 1
        if chunk is None:  # the newest chunk, or a new one when it is full
            chunk = self._next_chunk - 1
            if chunk < 0 or len(self._chunks[chunk]) >= _CHUNK:
                chunk = self._next_chunk
        self._next_chunk = max(self._next_chunk, chunk + 1)
        self._chunks.setdefault(chunk, {})[path] = None
        self._chunk_of[path] = chunk
        self._texts.pop(chunk, None)

    def _drop(self, path: str) -> Read | None:
        read = self._reads.pop(path, None)
        if read is not None:
            key = (read.head_len, read.head_crc)
            paths = self._by_head[key]
            paths.discard(path)
            if not paths:
                del self._by_head[key]
            self._head_lengths[read.head_len] -= 1
            if not self._head_lengths[read.head_len]:
                del self._head_lengths[read.head_len]
            chunk = self._chunk_of.pop(path)
            members = self._chunks[chunk]
            del members[path]
            self._texts.pop(chunk, None)
            if not members and chunk != self._next_chunk - 1:
                del self._chunks[chunk]
        return read

    def remember(self, path: str, read: Read) -> None:
        """``path`` was read to ``read.length`` (:func:`fingerprint`). A read of no bytes is
        not remembered: continuing at 0 is reading whole, and empty files (markers, a
        ``_SUCCESS``) would all share one head, each new one compared with every other."""
        if read.length == 0:
            return
        self._put(path, read)
        self._bound(read.at)

    def set_aside(self, path: str) -> None:
        """``path`` holds new content (:meth:`continues_at` said 0): what was read there stays
        known aside, for another path to continue (the copy of a copytruncate, or a rotated
        file, listed after the new file under the old name)."""
        earlier = self._drop(path)
        if earlier is not None:
            self._put(f"{path}{_ASIDE}{earlier.length}:{earlier.edge_crc}", earlier)

    def forget(self, path: str, length: int) -> None:
        """``path``, read to ``length``, left the directory by the feed's own doing
        (``after_read``): a file landing under the name later is new, even byte for byte the
        same (a re-sent export). A read of the name to another length (a newer file) stays."""
        read = self._reads.get(path)
        if read is not None and read.length == length:
            self._drop(path)

    def _bound(self, now: float) -> None:
        """Forget the oldest reads beyond ``keep_files`` or ``keep_for`` (the reads are in the
        order remembered, so this looks at those it forgets and one more)."""
        old = []
        kept = len(self._reads)
        for path, read in self._reads.items():
            if kept <= self.keep_files and now - read.at <= self.keep_for:
                break
            old.append(path)
            kept -= 1
        if not old:
            return
        for path in old:
            self._drop(path)
        before, self.forgotten = self.forgotten, self.forgotten + len(old)
        # Once at WARNING, then at INFO per thousand: a stream of many small files forgets
        # one at each file once it is full.
        if before == 0 or before // 1000 != self.forgotten // 1000:
            logger.log(
                logging.WARNING if before == 0 else logging.INFO,
                "forgot what was read of %d file(s) in all (kept: %d files for %gs; e.g. %s): "
                "a file listed again under such a name is read whole",
                self.forgotten,
                self.keep_files,
                self.keep_for,
                old[0],
            )

    # -- the rule ---------------------------------------------------------------------------

    def continues_at(self, path: str, size: int, read: ReadRange) -> Continuation:
        """Where the file at ``path`` (``size`` bytes now) continues: rule 2 or 3 of the
        module's docstring. Reads at most two windows of 4 KiB per path compared, none while
        nothing is remembered (the first run)."""
        if not self._reads:
            return Continuation(0, None)
        own = self._reads.get(path)
        head = read(path, 0, HEAD)
        if own is not None and self._holds(path, size, own, head, read):
            return Continuation(own.length, None)
        best: tuple[int, str] | None = None
        for other, earlier in self._candidates(path, size, head):
            longer = best is None or earlier.length > best[0]
            if (
                longer
                and self._holds(path, size, earlier, head, read)
                and not self._still_at(other, earlier, read)
            ):
                best = (earlier.length, other)
        if best is None:
            return Continuation(0, None)
        return Continuation(best[0], best[1])

    def start(
        self, path: str, size: int, read: ReadRange, *, name: str, display: Callable[[str], str]
    ) -> Continuation:
        """:meth:`continues_at`, applied: what was read under ``path`` is set aside when the
        file is new, or the memory it continues is taken; both logged (``name``: the reader's,
        ``display``: a path as log lines show it). One rule for every engine's reader."""
        where = self.continues_at(path, size, read)
        if where.offset == 0:
            if path in self:
                self.set_aside(path)
                logger.info(
                    "%s: %s holds other bytes than those read before: read whole, as new",
                    name,
                    display(path),
                )
            return where
        if where.taken_from is not None:
            self.take(path, where.taken_from)
        logger.info(
            "%s: %s continues at byte %d: its first %d bytes were read before%s",
            name,
            display(path),
            where.offset,
            where.offset,
            "" if where.taken_from is None else f" as {display(where.taken_from)}",
        )
        return where

    def take(self, path: str, taken_from: str) -> None:
        """``path`` continued where ``taken_from`` was read (:meth:`continues_at`): the memory
        moves to it (kept until ``path`` is read on and remembered anew)."""
        earlier = self._drop(taken_from)
        if earlier is not None:
            self._put(path, earlier)

    def _candidates(self, path: str, size: int, head: bytes) -> Iterator[tuple[str, Read]]:
        """Other paths read before whose head the file begins with: one CRC of the file's
        first bytes per head length known, computed on as the lengths grow."""
        crc, done = 0, 0
        for length in sorted(n for n in self._head_lengths if n <= len(head)):
            crc = zlib.crc32(head[done:length], crc)
            done = length
            for other in tuple(self._by_head.get((length, crc), ())):
                earlier = self._reads[other]
                mine = other == path or other.startswith(path + _ASIDE)
                if not mine and earlier.length <= size:
                    yield other, earlier

    @staticmethod
    def _holds(path: str, size: int, earlier: Read, head: bytes, read: ReadRange) -> bool:
        """Whether the file begins with what ``earlier`` read (head and edge compared)."""
        if size < earlier.length or len(head) < earlier.head_len:
            return False
        if zlib.crc32(head[: earlier.head_len]) != earlier.head_crc:
            return False
        start = earlier.length - earlier.edge_len
        if earlier.length <= len(head):
            return zlib.crc32(head[start : earlier.length]) == earlier.edge_crc
        if earlier.edge_len <= EDGE:
            edge = read(path, start, earlier.edge_len)
            return len(edge) == earlier.edge_len and zlib.crc32(edge) == earlier.edge_crc
        # The exact check: all the bytes read, in chunks.
        return _crc_of(path, start, earlier.length, read) == earlier.edge_crc

    def _still_at(self, other: str, earlier: Read, read: ReadRange) -> bool:
        """Whether ``other`` still holds what was read there (then it is not this file's)."""
        if _ASIDE in other:
            return False  # its path holds other bytes since
        return holds(other, earlier, read)

    # -- state ------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Plain values: the reads in chunks, each encoded once per change (a cut with no
        change costs nothing, one with a file remembered encodes one chunk)."""
        texts = []
        for chunk, members in self._chunks.items():
            if not members:
                continue
            text = self._texts.get(chunk)
            if text is None:
                rows = [[p, *self._reads[p]] for p in members]
                raw = json.dumps(rows, separators=(",", ":")).encode()
                text = self._texts[chunk] = base64.b64encode(zlib.compress(raw, 6)).decode()
            texts.append(text)
        return {"reads": texts, "forgotten": self.forgotten}

    def restore(self, state: dict[str, Any] | None) -> None:
        """The ledger of :meth:`state` (``None``: nothing read yet). ``reads`` is a list of
        chunks, or one string (the state of a ledger before chunks)."""
        self._reads = {}
        self._by_head = {}
        self._head_lengths = collections.Counter()
        self._chunk_of, self._chunks, self._texts, self._next_chunk = {}, {}, {}, 0
        self.forgotten = 0
        if not state:
            return
        texts = state.get("reads") or []
        for chunk, text in enumerate([texts] if isinstance(texts, str) else texts):
            for row in json.loads(zlib.decompress(base64.b64decode(text))):
                read = Read(
                    int(row[1]),
                    int(row[2]),
                    int(row[3]),
                    int(row[4]),
                    int(row[5]),
                    float(row[6]),
                )
                self._put(str(row[0]), read, chunk=chunk)
            if not isinstance(texts, str):
                self._texts[chunk] = str(text)  # as it was: encoded again only once changed
        self.forgotten = int(state.get("forgotten", 0))


#: What a range's file held when it was planned: ``(length, head_len, head_crc, edge_len,
#: edge_crc)`` of its first ``length`` bytes (the range's end), as the ledger remembers them.
Expected = tuple[int, int, int, int, int]


class FileMoved(Exception):
    """The file at a range's path no longer holds the bytes planned there (rotated since the
    plan): raised before any record of the range is yielded, so the range can be read again
    where the bytes are now."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def expected_read(expected: Expected) -> Read:
    """What a task compares a range's file with: the head and the edge; under the exact check
    (an edge of all the bytes, which the planner compares) the head alone."""
    length, head_len, head_crc, edge_len, edge_crc = expected
    if edge_len > EDGE:
        edge_len, edge_crc = 0, 0
    return Read(length, head_len, head_crc, edge_len, edge_crc, 0.0)


def verify(
    read_file: ReadRange, path: str, expected: Expected, known: bytes = b"", known_at: int = 0
) -> None:
    """Raise :class:`FileMoved` unless ``path`` begins with the bytes planned: the head and
    the edge compared (an exact check's edge, all the bytes, is left to the planner: here the
    head). ``known``: bytes of the file at ``known_at`` already read (the range's first
    chunk), used instead of reading them again; a small file's check reads nothing more."""
    earlier = expected_read(expected)
    length = earlier.length
    known_end = known_at + len(known)

    def read(p: str, offset: int, n: int) -> bytes:
        if known_at <= offset < known_end and offset + n <= known_end:
            return known[offset - known_at : offset - known_at + n]
        if known_at <= offset < known_end and known_end >= length:
            return known[offset - known_at :]  # all the file holds up to the range's end
        return read_file(p, offset, n)

    try:
        same = holds(path, earlier, read)
    except FileNotFoundError:
        same = False
    if not same:
        raise FileMoved(path)
