"""The scan cursor: which files of a directory listing are new. One rule for both engines.

Files are emitted in the strict order (mtime_ns, name); the *key* is the greatest file emitted.
A file is new when

1. it sorts after the key; or
2. its mtime is within the late window below the key (at or after the *floor*) and its name is
   not among the names emitted there (the *window*, kept by name); or
3. its mtime is below the floor and the file was never accounted for: while the scan runs, a
   name absent from the previous listing; after a restart, a name the *census* (a fixed-size
   summary of every name accounted for below the floor, :mod:`operators.scan.census`) does not hold.

A file whose mtime is ahead of the listing time by more than half the late window (a writer on
a skewed clock, ``touch -d``, ``cp -p`` from such a host) is emitted in its place in the order,
but leaves no key of its own: its name is kept in the window until the floor passes its real
mtime, and the key stays at the greatest file emitted at its real place (before any, just below
every file at the listing's time). A WARNING names it once.
Were its mtime the key, one such file would drag the key, and the floor with it, a day ahead:
every ordinary file after it would count as late and, after a restart, overflow the census.
Nor does the key take the listing time with the file's name: a file landing later with that
mtime (coarse mtime clocks stamp many files alike) and a name not after it, the next export
under the same name among them, would sort before the key, and with ``late_window = 0`` be
passed over though nothing after it was read.

Names whose file left the directory by ``after_read`` (archived or deleted by the scan itself)
are forgotten at once (:meth:`ScanCursor.forget`), as names that vanished from a listing are:
a file landing later under such a name is a new file, whether or not the scan restarted.

A file read before whose name is listed at another mtime has *changed*. Whether it is the same file
is decided by identity, never by name: the file id of the listing (the inode on a local disk,
the HDFS fileId; hdfs-native lists none, so ``identify`` reads it through WebHDFS, for the files
emitted and the names found changed only). Another id than the file read had: *replaced* (``mv
new.tmp name``, deleted and landed again between two listings), new data, read whole like a new
file. The same id, or one not known: changed in place (appended to, truncated), and
``on_modified`` applies (a WARNING and a count, an error, or ``reread``). The id of the file
read is kept for every name accounted for while the scan runs, and in the state for the names
in the window only: after a restart a name read below the floor is in the census alone, without
one (where the listing has ids, the first listing's are taken for the files it finds unchanged).
The ids are compared only for names whose mtime changed, so a listing costs what it did. ext4
hands a freed inode number out again at once: a file deleted and landed again between two
listings may have the id of the one read, and is then taken as changed in place (reported,
never read twice).

Case 3 is how a file that lands late, by any amount (``cp -p``, ``distcp -p``, write elsewhere
then rename), is still read once. With ``late_window = 0`` (strict, as IBM Streams' scan) no
file that sorts before the key is read: such a file is *passed over*. A file is also passed
over when, after a restart, more files below the floor changed than the census can tell apart.
Passing over is never silent: a WARNING names the file (or the count) and its lateness, the
count is in the state (``passed_over``), and ``on_late_file = "fail"`` makes it an error.

State (plain values, JSON)::

    {"key": {"mtime_ns", "name"} | null, "floor": int | null, "window": [text, ...],
     "ahead": [text, ...], "census": text | null, "passed_over": int}

The window is stored in segments of names in the order they were emitted: a segment is encoded
once when it fills, so a cut encodes only the last one, however many files a burst brought.
A segment holds the names, their mtimes and, where known, their file ids (a segment written
before ids were kept has none: its names' changes follow ``on_modified``).
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import logging
import operator
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

from operators.common.errors import OperatorError
from operators.scan.census import Census, name_key
from operators.scan.listing import sort_keyed
from region.fs import FileIdReader, FileSystem, ListingEntry

__all__ = ["LateFileError", "ModifiedFileError", "ScanCursor", "describe_state"]

logger = logging.getLogger(__name__)

#: ``[scan] on_modified``, as the engines know it (the settings also take ``"new_version"``, the
#: name of ``"reread"``).
OnModified = Literal["warn", "fail", "reread", "continue"]

#: The filesystems (by display) whose missing file ids were announced: once per process.
_UNIDENTIFIED: set[str] = set()


def identifier(
    fs: FileSystem, *, on_modified: str = "warn"
) -> Callable[[list[str]], list[int | None]] | None:
    """What reads the file ids ``fs``'s listings leave out (``ScanCursor(identify=...)``), the
    same way :func:`region.fs.file_identity` reads one for the source. A filesystem that cannot
    read them (hdfs:// with no WebHDFS known) is announced at WARNING, once, where the policy
    decides by identity (``warn``, ``fail``): a file replaced under a name read before then
    looks like one that grew or changed in place. ``continue`` decides by content."""
    if not isinstance(fs, FileIdReader):
        return None
    shown = fs.display("/")
    if on_modified in ("warn", "fail") and not fs.identifies_files and shown not in _UNIDENTIFIED:
        _UNIDENTIFIED.add(shown)
        logger.warning(
            "%s: no fileIds without the cluster's WebHDFS, so a scan cannot tell a file "
            "replaced under a name read from one that grew or changed in place: on_modified "
            "applies to both ('warn': what changed is not read). Name the cluster's "
            "configuration ([filesystem] config_dir or HADOOP_CONF_DIR) or its webhdfs_uri",
            shown,
        )
    return fs.file_ids


_NS = 1_000_000_000
_mtime_and_name = operator.itemgetter(0, 1)
_mtime = operator.itemgetter(0)
_name = operator.itemgetter(1)
_name_and_mtime = operator.itemgetter(1, 0)
_file_id = operator.itemgetter(5)
_path = operator.itemgetter(2)
#: Names per window segment: a cut encodes at most this many (the open segment).
_SEGMENT = 256


class LateFileError(OperatorError):
    """A file would be passed over and ``on_late_file = "fail"``."""

    permanent = True  # the policy asked to stop: a reset would meet the same file


class ModifiedFileError(OperatorError):
    """A file read before changed and ``on_modified = "fail"``."""

    permanent = True


def _seconds(ns: int) -> str:
    return f"{ns / _NS:.3f}s"


class _Segment:
    """Names emitted one after the other: ``top`` is their greatest mtime."""

    __slots__ = ("ids", "names", "text", "top")

    def __init__(
        self,
        names: dict[str, int] | None = None,
        text: str | None = None,
        ids: dict[str, int | None] | None = None,
    ) -> None:
        self.names: dict[str, int] = names if names is not None else {}
        # The file id of each name's file as it was read, where known.
        self.ids: dict[str, int | None] = ids if ids is not None else {}
        self.top = max(self.names.values(), default=-(1 << 62))
        self.text = text  # the encoded names, or None when they changed since


class _Window:
    """The names emitted at or above the floor (name -> mtime), kept in segments.

    A name emitted with an mtime ahead of its listing's time has a segment of its own, aside
    (``ahead``): it leaves when the floor passes its mtime, and the names emitted after it do
    not wait for it.
    """

    def __init__(self) -> None:
        self.where: dict[str, _Segment] = {}
        self.segments: deque[_Segment] = deque()
        self.ahead: list[_Segment] = []

    def __contains__(self, name: object) -> bool:
        return name in self.where

    def __len__(self) -> int:
        return len(self.where)

    def _tail(self) -> _Segment:
        """The segment names are added to (a new one once the last is full)."""
        tail = self.segments[-1] if self.segments else None
        if tail is None or len(tail.names) >= _SEGMENT:
            tail = _Segment()
            self.segments.append(tail)
        return tail

    def put(self, name: str, mtime: int, file_id: int | None = None) -> None:
        if name in self.where:
            self.drop(name)
        tail = self._tail()
        tail.names[name] = mtime
        tail.ids[name] = file_id
        tail.text = None
        tail.top = max(tail.top, mtime)
        self.where[name] = tail

    def put_ahead(self, name: str, mtime: int, file_id: int | None = None) -> None:
        """:meth:`put` for a name whose mtime is ahead of its listing's time."""
        if name in self.where:
            self.drop(name)
        segment = _Segment({name: mtime}, ids={name: file_id})
        self.ahead.append(segment)
        self.where[name] = segment

    def put_many(self, entries: Sequence[ListingEntry]) -> None:
        """:meth:`put` for entries whose names are not in the window, in bulk."""
        where = self.where
        start = 0
        while start < len(entries):
            tail = self._tail()
            chunk = entries[start : start + _SEGMENT - len(tail.names)]
            tail.names.update(map(_name_and_mtime, chunk))
            tail.ids.update(zip(map(_name, chunk), map(_file_id, chunk), strict=True))
            tail.top = max(tail.top, chunk[-1][0])  # entries are in (mtime, name) order
            tail.text = None
            where.update(zip(map(_name, chunk), itertools.repeat(tail)))
            start += len(chunk)

    def mtime(self, name: str) -> int:
        return self.where[name].names[name]

    def file_id(self, name: str) -> int | None:
        """The file id of the file read under ``name`` (``None``: not in the window, or not
        known)."""
        segment = self.where.get(name)
        return None if segment is None else segment.ids.get(name)

    def drop(self, name: str) -> None:
        segment = self.where.pop(name)
        del segment.names[name]
        segment.ids.pop(name, None)
        segment.text = None

    def below(self, floor: int) -> list[str]:
        """Remove and return the names of the leading segments wholly below ``floor``.

        Segments are in emission order, so their tops rise but not strictly: a segment behind
        a higher one waits for it, and its names stay in the window meanwhile (still known).
        """
        out: list[str] = []
        segments = self.segments
        while segments and segments[0].top < floor:
            segment = segments.popleft()
            out += segment.names
            for n in segment.names:
                del self.where[n]
        if self.ahead:
            passed = [s for s in self.ahead if s.top < floor or not s.names]
            self.ahead = [s for s in self.ahead if s.top >= floor and s.names]
            for segment in passed:
                out += segment.names
                for n in segment.names:
                    del self.where[n]
        return out

    def encode(self, *, ahead: bool = False) -> list[str]:
        out = []
        for segment in self.ahead if ahead else self.segments:
            if not segment.names:
                continue
            if segment.text is None:
                segment.text = _encode_names(segment.names, segment.ids)
            out.append(segment.text)
        return out

    def load(self, texts: Iterable[str], *, ahead: bool = False) -> None:
        for text in texts:
            decoded = _decode_names(text)
            names = {n: m for n, m, _ in decoded}
            segment = _Segment(names, text, {n: i for n, _, i in decoded})
            (self.ahead.append if ahead else self.segments.append)(segment)
            self.where.update(dict.fromkeys(names, segment))


class ScanCursor:
    """The scan's memory: key, window, census; decides which listed files are new.

    ``display`` turns a path into what log lines show. :meth:`new_files` is called once per
    listing; :meth:`emit` for each file handed downstream (only where the next cut covers it).
    """

    def __init__(
        self,
        *,
        window_ns: int,
        on_late_file: Literal["warn", "fail"] = "warn",
        on_modified: OnModified = "warn",
        name: str = "scan",
        display: Callable[[str], str] = str,
        identify: Callable[[list[str]], list[int | None]] | None = None,
    ) -> None:
        self.window_ns = max(0, window_ns)
        # Reads the file ids a listing leaves out (hdfs://: FileIdReader.file_ids), for the
        # files emitted and the names found changed only.
        self._identify = identify
        # How far ahead of the listing time an mtime may be and still move the key: half the
        # window keeps the files after it inside the window (a NameNode's clock a few seconds
        # ahead of this host's is common, and harmless).
        self._ahead_ns = self.window_ns // 2
        self.on_late_file = on_late_file
        self.on_modified = on_modified
        self.name = name
        self._display = display
        self.passed_over_now = 0  # this object's counts (metrics), not state
        self.modified_now = 0
        # The time of the last listing (ns), when the caller gave it: no key goes past it.
        self._now_ns: int | None = None
        self.reset(None)

    # -- state ------------------------------------------------------------------------------

    def reset(self, state: Mapping[str, Any] | None) -> None:
        """Restore ``state`` (``None``: nothing emitted yet); forget every listing."""
        self.key: tuple[int, str] | None = None
        self.floor: int | None = None
        self._window = _Window()
        self.census: Census | None = Census()
        self.passed_over = 0
        self.modified = 0
        # The last listing's files that are accounted for (emitted, or not new): name -> mtime;
        # None after a reset: the next listing is checked against the census instead.
        # (None: a name known from the census, left out of the listing as too young.)
        self._seen: dict[str, int | None] | None = None
        # The file id of each file of _seen where known: what a name found changed is
        # compared with (another id: the file was replaced, and is new).
        self._ids: dict[str, int | None] = {}
        # Names forgotten (forget) after a reset, before the first listing settles them.
        self._forgotten: set[str] = set()
        # Names of _seen without an mtime (None) that the census holds: read below the floor,
        # too young to be listed after a reset.
        self._young_in_census: set[str] = set()
        if state is None:
            return
        key = state.get("key")
        if key is not None:
            self.key = (int(key["mtime_ns"]), str(key["name"]))
        if "census" not in state:
            # A checkpoint of the earlier format: {"key", "late": {name: mtime_ns}}.
            self.census = None
            for n, m in (state.get("late") or {}).items():
                self._window.put(str(n), int(m))
            self.floor = None if self.key is None else self._floor_for(self.key)
        else:
            census = state.get("census")
            self.census = Census.decode(census) if census is not None else None
            floor = state.get("floor")
            self.floor = None if floor is None else int(floor)
            self._window.load(state.get("window") or ())
            self._window.load(state.get("ahead") or (), ahead=True)
            self.passed_over = int(state.get("passed_over", 0))
            self.modified = int(state.get("modified", 0))
            self._forgotten = {str(n) for n in state.get("forgotten") or ()}
        if self.key is not None:
            self._advance_floor()

    def state(self) -> dict[str, Any]:
        """The state as plain values (only the segments that changed are encoded again)."""
        window = self._window.encode()
        return {
            "key": None if self.key is None else {"mtime_ns": self.key[0], "name": self.key[1]},
            "floor": self.floor,
            "window": window,
            "ahead": self._window.encode(ahead=True),
            "census": None if self.census is None else self.census.encode(),
            "passed_over": self.passed_over,
            "modified": self.modified,
            # Forgotten after a reset, not settled by a listing yet: a crash before that
            # listing must not bring the names back from the census.
            **({"forgotten": sorted(self._forgotten)} if self._forgotten else {}),
        }

    @property
    def window_size(self) -> int:
        return len(self._window)

    # -- the rule ---------------------------------------------------------------------------

    def is_late(self, entry: ListingEntry) -> bool:
        """Whether a new file sorts before the key (it is emitted whole, out of order)."""
        return self.key is not None and (entry[0], entry[1]) < self.key

    def is_ahead(self, entry: ListingEntry) -> bool:
        """Whether a file's mtime is ahead of the last listing's time: it leaves no key of its
        own, so it is emitted whole (no batch ends inside it)."""
        return self._now_ns is not None and entry[0] > self._now_ns + self._ahead_ns

    def forget(self, files: Iterable[tuple[str, int]]) -> None:
        """Files (name, mtime_ns when read) that left the directory by the scan's own doing
        (``after_read``): their names leave the cursor's memory, as names that vanished from a
        listing do, so a file landing later under one of them is new. A name the cursor holds
        at another mtime stays: that is a file read since under the same name."""
        seen = self._seen
        window = self._window
        for n, mtime in files:
            if n in window:
                if window.mtime(n) == mtime:
                    window.drop(n)
                    self._ids.pop(n, None)
                    if seen is not None:
                        seen.pop(n, None)
            elif seen is None:
                # After a reset: the census may hold it; the first listing settles it.
                self._forgotten.add(n)
            elif seen.get(n) == mtime:
                # Accounted for and listed, not in the window: below the floor, in the census.
                del seen[n]
                self._ids.pop(n, None)
                if self.census is not None:
                    self.census.remove(n)

    @property
    def settling(self) -> bool:
        """Whether the next listing is the first since a reset (checked against the window
        and the census): :meth:`new_files` then wants the names the pattern left out."""
        return self._seen is None and self.key is not None

    def new_files(
        self,
        listing: list[ListingEntry],
        *,
        now_ns: int | None = None,
        young: Collection[str] = (),
        unmatched: Collection[str] = (),
    ) -> list[ListingEntry]:
        """The new files of ``listing`` (in any order), sorted by (mtime_ns, name).

        ``young``: names of files in the directory that the listing leaves out as too young
        (``min_file_age``); ``unmatched``: the names the pattern leaves out (needed only when
        :attr:`settling`). A name read before that is left out is still known, not forgotten
        as a file gone: a file appended to after it was read is reported once old enough
        (``on_modified``), and one read before a pattern was narrowed is not read again when
        the pattern is widened again.

        ``now_ns``: the time of the listing; a file emitted with an mtime ahead of it is kept
        by name and leaves the key at ``now_ns`` (see the module's docstring).

        Files that can only be passed over, and files changed after they were read, are
        reported here (WARNING and count, or an error) and accounted for, so each is reported
        once; with ``on_modified = "reread"`` a changed file is new again. A file under a name
        read before that is another file (another file id: replaced) is new, whatever
        ``on_modified`` says.

        The files returned carry their file id (read through ``identify`` where the listing
        left it out): :meth:`emit` keeps it.
        """
        if now_ns is not None:
            self._now_ns = now_ns
        key = self.key
        seen = self._seen
        if key is None:
            self._seen = {}
            self._ids = {}
            return self._with_ids(sort_keyed(list(listing)), {})
        changed: dict[str, int | None]
        vanished: set[str] = set()
        if seen is not None:
            # A file of the last listing with the same mtime is accounted for: never new, and
            # never changed. Only the others (a handful, in a directory that only grows) are
            # sorted and looked at, not every file of the directory each scan. C-level maps:
            # this runs once per file listed.
            differs = map(operator.ne, map(seen.get, map(_name, listing)), map(_mtime, listing))
            maybe = list(itertools.compress(listing, differs))
            if listing and listing[0][5] is not None:
                # The listing has file ids (a backend lists them for all its files or none):
                # a file renamed over one read with the very same mtime (touch -r, cp -p) is
                # another file too, and costs no request to tell. A pass of its own: folding
                # it into the one above costs twice as much.
                other = map(
                    operator.ne, map(self._ids.get, map(_name, listing)), map(_file_id, listing)
                )
                maybe += [e for e in itertools.compress(listing, other) if seen.get(e[1]) == e[0]]
            maybe = sort_keyed(maybe)
            fresh = {e[1] for e in maybe if e[1] not in seen}
            if len(listing) - len(fresh) != len(seen):  # names are unique in a directory
                vanished = seen.keys() - set(map(_name, listing))
                if young:
                    vanished -= set(young)  # still there: too young to be listed
                self._drop_vanished(vanished)
            changed = {e[1]: seen[e[1]] for e in maybe if e[1] in seen}
            listing = maybe
        else:
            listing = sort_keyed(list(listing))
            listed: dict[str, int | None] = dict(map(_name_and_mtime, listing))
            fresh, changed = self._check_census(listing, listed, young, unmatched)
        fetched: dict[str, int | None] = {}
        again = self._modified(listing, changed, fetched) if changed else set()
        low, after_key = self._regions(listing)
        out = [e for e in listing[:low] if e[1] in fresh or e[1] in again]
        if out and self.window_ns == 0:
            self._pass_over(out)
            out = []
        window = self._window.where
        out += [
            e
            for e in listing[low:after_key]
            if (e[1] not in window and e[1] not in changed) or e[1] in again
        ]
        # After the key everything is new but names accounted for at that mtime (a changed
        # file reported, or read again, before).
        known = seen if seen is not None else window
        out += [
            e
            for e in listing[after_key:]
            if (e[1] not in known and e[1] not in changed) or e[1] in again
        ]
        # The files of this listing that are accounted for, for the next: the last listing's,
        # updated in place where it differs (rebuilding it would cost a dict of every file).
        ids = self._ids
        if seen is not None:
            for n in vanished:
                del seen[n]
                ids.pop(n, None)
            seen.update(map(_name_and_mtime, listing))
            # Ids the listing has; one it leaves out (hdfs://) keeps the one known.
            ids.update((e[1], e[5]) for e in listing if e[5] is not None)
            listed = seen
        else:
            ids = self._ids = dict(zip(map(_name, listing), map(_file_id, listing), strict=True))
            for n in window.keys() & ids.keys():
                if ids[n] is None:
                    ids[n] = self._window.file_id(n)
        ids.update(fetched)
        for entry in out:
            del listed[entry[1]]
        self._seen = listed
        return self._with_ids(out, fetched)

    def emit(self, entry: ListingEntry) -> None:
        """Account for ``entry`` as emitted (call it where the next cut covers the emission)."""
        mtime, name, file_id = entry[0], entry[1], entry[5]
        if self._seen is not None:
            self._seen[name] = mtime
        self._ids[name] = file_id
        now = self._now_ns
        if now is not None and mtime > now + self._ahead_ns:
            self._emit_ahead(entry, now)
            return
        key = self.key
        if key is None or (mtime, name) > key:
            self.key = (mtime, name)
            if self.floor is None:
                self.floor = self._floor_for(self.key)
        if self.floor is not None and mtime < self.floor:
            if self.census is not None:
                self.census.add(name)
        else:
            self._window.put(name, mtime, file_id)
        self._advance_floor()

    def emit_many(self, entries: Sequence[ListingEntry]) -> None:
        """:meth:`emit` for each of ``entries``, in bulk when they all sort after the key (the
        usual case: the files after the key, in order)."""
        if not entries:
            return
        first = entries[0]
        where = self._window.where
        if (
            (self.key is not None and (first[0], first[1]) <= self.key)
            or (where and not where.keys().isdisjoint(map(_name, entries)))
            or self.is_ahead(entries[-1])
        ):
            for entry in entries:
                self.emit(entry)
            return
        if self._seen is not None:
            self._seen.update(map(_name_and_mtime, entries))
        self._ids.update(zip(map(_name, entries), map(_file_id, entries), strict=True))
        last = entries[-1]
        self.key = (last[0], last[1])
        self._window.put_many(entries)
        self._advance_floor()

    # -- steps ------------------------------------------------------------------------------

    def _emit_ahead(self, entry: ListingEntry, now: int) -> None:
        """A file whose mtime is ahead of its listing's time: kept by name until the floor
        passes its mtime. The key stays; the first file of all leaves (now, ""), which sorts
        before every file that can land at the listing's time or after."""
        mtime, name = entry[0], entry[1]
        logger.warning(
            "%s: file %s has an mtime %s ahead of the time it was listed (a skewed clock, "
            "touch -d, cp -p from such a host): it is read now and kept by name; files landing "
            "after it are read as usual",
            self.name,
            self._display(entry[2]),
            _seconds(mtime - now),
        )
        if self.key is None:
            self.key = (now, "")
            self.floor = self._floor_for(self.key)
        self._window.put_ahead(name, mtime, entry[5])
        self._advance_floor()

    def _regions(self, listing: list[ListingEntry]) -> tuple[int, int]:
        """(end of the census region, end of the files up to the key) in a sorted listing.

        The census region is the files below the floor that also sort before the key (without
        a window the floor is past the key's mtime, and ties after the key are not read yet).
        """
        assert self.key is not None and self.floor is not None
        after_key = bisect.bisect_right(listing, self.key, key=_mtime_and_name)
        return min(bisect.bisect_left(listing, (self.floor,)), after_key), after_key

    def _floor_for(self, key: tuple[int, str]) -> int:
        # Strict (no window): everything up to the key's mtime is below the floor.
        return key[0] - self.window_ns if self.window_ns else key[0] + 1

    def _advance_floor(self) -> None:
        """Raise the floor with the key; names falling below it move into the census."""
        assert self.key is not None
        floor = self._floor_for(self.key)
        if self.floor is not None and floor <= self.floor:
            return
        self.floor = floor
        below = self._window.below(floor)
        if self.census is not None:
            for n in below:
                self.census.add(n)

    def _drop_vanished(self, gone: Iterable[str]) -> None:
        """Names accounted for that left the directory leave the window or the census."""
        for n in gone:
            self._ids.pop(n, None)
            if n in self._window:
                self._window.drop(n)
            elif self.census is not None:
                self.census.remove(n)

    def _check_census(
        self,
        listing: list[ListingEntry],
        listed: dict[str, int | None],
        young: Collection[str],
        unmatched: Collection[str],
    ) -> tuple[set[str], dict[str, int | None]]:
        """After a reset: the names below the floor never accounted for (census difference),
        and the names accounted for whose file changed since (name -> mtime when read, or
        ``None`` when the census, which keeps names only, had it)."""
        assert self.floor is not None
        floor = self.floor
        window = self._window
        # Names below the floor whose file after_read moved away (forget): a file listed
        # under one now is new, wherever its mtime puts it.
        forgotten, self._forgotten = self._forgotten, set()
        low = self._regions(listing)[0]
        below = [e[1] for e in listing[:low] if e[1] not in window]
        # Names of the window that left the directory while the scan was stopped leave the
        # window, as they do while it runs (_drop_vanished): one landing again later is new.
        # A name left out now (too young, or the pattern narrowed) is still there: it stays.
        left_out = {*young, *unmatched}
        for n in window.where.keys() - listed.keys() - left_out:
            window.drop(n)
        # A name read before, too young to be listed now, is accounted for as it was read: the
        # next listing finds it changed (listed later, at its new mtime).
        listed.update((n, window.mtime(n)) for n in young if n in window)
        changed: dict[str, int | None] = {}
        ids = {e[1]: e[5] for e in listing if e[5] is not None}
        for n in window.where.keys() & listed.keys():
            read_id = window.file_id(n)
            if window.mtime(n) != listed[n] or (
                # The same mtime, another file (touch -r, cp -p): replaced.
                read_id is not None and ids.get(n, read_id) != read_id
            ):
                changed[n] = window.mtime(n)
        current = Census.of(below)
        previous = self.census
        if previous is None:
            logger.warning(
                "%s: the checkpoint predates the census of files below the late window: the %s "
                "files with an mtime before %s are taken as read",
                self.name,
                len(below),
                _seconds(floor),
            )
            self.census = current
            return set(), changed
        diff = current.subtract(previous)
        removed = diff.removed
        if removed and left_out:
            # Names accounted for that are left out now (too young, or the pattern narrowed
            # since): kept in the census, as in the window, so that they are not read again.
            still_there = {name_key(n): n for n in left_out if n not in window}
            kept = removed & still_there.keys()
            for k in kept:
                current.add(still_there[k])
            # Too young: accounted for (the census holds it), its mtime when read not known.
            waiting = {still_there[k] for k in kept if still_there[k] in young}
            listed.update(dict.fromkeys(waiting))
            self._young_in_census |= waiting
            removed = removed - kept
        by_key = {name_key(n): n for n in below} if diff.added else {}
        fresh = {by_key[k] for k in diff.added if k in by_key}
        fresh.update(forgotten.intersection(below))
        if removed:
            # A name read below the floor that is now listed above it: its file changed.
            inside = set(below)
            moved = {name_key(n): n for n in listed if n not in inside and n not in window}
            changed.update(
                (moved[k], None) for k in removed if k in moved and moved[k] not in forgotten
            )
        for n in fresh:
            current.remove(n)
        self.census = current
        if not diff.complete:
            unknown = max(1, diff.net - len(fresh) + len(removed))
            message = (
                f"{self.name}: more files with an mtime before the late window ({_seconds(floor)}) "
                "changed while the scan was stopped than its census tells apart (a larger "
                f"late_window keeps them by name); at least {unknown} file(s) that landed then"
            )
            if self.on_late_file == "fail":
                raise LateFileError(f"{message} cannot be told from files already read")
            self.passed_over += unknown
            self.passed_over_now += unknown
            logger.warning("%s are passed over", message)
        return fresh, changed

    def _modified(
        self,
        listing: list[ListingEntry],
        changed: Mapping[str, int | None],
        fetched: dict[str, int | None],
    ) -> set[str]:
        """Files read before that changed since (a new mtime). One that is another file than
        the one read (replaced) is new: read whole, not counted. The others (changed in place,
        or not known to be another file) are reported as ``on_modified`` says and accounted for
        at their new mtime. Returns the names to read again (replaced, and ``reread``).
        ``fetched`` gets the file ids read through ``identify``."""
        replaced = self._replaced(listing, changed, fetched)
        # ``continue``: emitted again as well; the source starts it where its content was read
        # to (operators.source.ledger).
        rereads = self.on_modified in ("reread", "continue")
        again = set(changed) if rereads else replaced
        for n in again:  # forgotten: read again whole, as new files
            if n in self._window:
                self._window.drop(n)
            elif self.census is not None and (changed[n] is not None or n in self._young_in_census):
                # (A name found changed by the census after a restart, mtime None, is not in
                # the census rebuilt from the listing: removing it there would leave a hole
                # that later reports the file read again as a late file passed over.)
                self.census.remove(n)
            self._young_in_census.discard(n)
        if rereads:
            return again
        for entry in listing:
            name = entry[1]
            if name not in changed or name in replaced:
                continue
            before = changed[name]
            moved = "" if before is None else f" by {_seconds(entry[0] - before)}"
            message = (
                f"{self.name}: file {self._display(entry[2])} changed after it was read (its "
                f"mtime moved{moved}): what changed is not read"
            )
            if self.on_modified == "fail":
                msg = f"{message} (on_modified = 'fail'; 'new_version' reads it again whole)"
                raise ModifiedFileError(msg)
            logger.warning("%s (on_modified = 'warn'; 'new_version' reads it again whole)", message)
            self.modified += 1
            self.modified_now += 1
            # Accounted for at its new mtime, so that it is reported once.
            if name in self._window:
                self._window.drop(name)
            elif self.census is not None and (before is not None or name in self._young_in_census):
                self.census.remove(name)
            self._young_in_census.discard(name)
            if self.floor is not None and entry[0] < self.floor:
                if self.census is not None:
                    self.census.add(name)
            else:
                self._window.put(name, entry[0], fetched.get(name, entry[5]))
        return again

    def _replaced(
        self,
        listing: list[ListingEntry],
        changed: Mapping[str, int | None],
        fetched: dict[str, int | None],
    ) -> set[str]:
        """The names of ``changed`` whose file is another than the one read: both file ids
        known, and different. Ids the listing left out are read through ``identify``, only
        for these names and only where the id of the file read is known."""
        ids, window = self._ids, self._window
        read: dict[str, int | None] = {
            n: ids[n] if ids.get(n) is not None else window.file_id(n) for n in changed
        }
        entries = [e for e in listing if read.get(e[1]) is not None]
        missing = [e for e in entries if e[5] is None]
        if missing and self._identify is not None:
            fetched.update(
                zip(map(_name, missing), self._identify(list(map(_path, missing))), strict=True)
            )
        replaced = set()
        for entry in entries:
            now = entry[5] if entry[5] is not None else fetched.get(entry[1])
            if now is not None and now != read[entry[1]]:
                replaced.add(entry[1])
                logger.info(
                    "%s: file %s is another file than the one read under its name (replaced): "
                    "it is read whole, as a new file",
                    self.name,
                    self._display(entry[2]),
                )
        return replaced

    def _with_ids(
        self, entries: list[ListingEntry], fetched: Mapping[str, int | None]
    ) -> list[ListingEntry]:
        """``entries`` with the file ids the listing left out (read through ``identify``): the
        ids of the files emitted are what a name found changed later is compared with."""
        if self._identify is None or None not in map(_file_id, entries):
            return entries
        missing = [e for e in entries if e[5] is None and e[1] not in fetched]
        known = dict(fetched)
        if missing:
            known.update(
                zip(map(_name, missing), self._identify(list(map(_path, missing))), strict=True)
            )
        return [
            e if e[5] is not None else (e[0], e[1], e[2], e[3], e[4], known.get(e[1]))
            for e in entries
        ]

    def _pass_over(self, entries: list[ListingEntry]) -> None:
        """Report files that cannot be emitted, then account for them."""
        key = self.key
        assert key is not None
        for entry in entries:
            lateness = key[0] - entry[0]
            message = (
                f"{self.name}: file {self._display(entry[2])} landed late (its mtime is "
                f"{_seconds(lateness)} before the newest file read) and late_window = 0 reads no "
                "file that sorts before one already read"
            )
            if self.on_late_file == "fail":
                msg = f"{message} (on_late_file = 'fail': move it away, or set a late_window)"
                raise LateFileError(msg)
            logger.warning("%s: passed over", message)
        for entry in entries:
            self.passed_over += 1
            self.passed_over_now += 1
            if self.census is not None:
                self.census.add(entry[1])


def _encode_names(names: Mapping[str, int], ids: Mapping[str, int | None]) -> str:
    """``[names, mtime deltas]``, and the file ids as deltas (``null`` where not known) when
    any is known."""
    items = sorted(names.items(), key=lambda item: (item[1], item[0]))
    mtimes = [m for _, m in items]
    deltas = mtimes[:1] + [b - a for a, b in itertools.pairwise(mtimes)]
    fields: list[list[Any]] = [[n for n, _ in items], deltas]
    file_ids = [ids.get(n) for n, _ in items]
    if any(i is not None for i in file_ids):
        # As deltas from the id before (files landing one after the other get ids close
        # together: HDFS counts fileIds up, ext4 inodes of one directory cluster).
        base = 0
        for k, i in enumerate(file_ids):
            if i is not None:
                file_ids[k], base = i - base, i
        fields.append(file_ids)
    raw = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(zlib.compress(raw.encode("utf-8", "surrogatepass"), 1)).decode()


def _decode_names(text: str) -> list[tuple[str, int, int | None]]:
    """``(name, mtime_ns, file id or None)`` of an encoded segment (one written before file
    ids were kept has none)."""
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
        fields = json.loads(raw.decode("utf-8", "surrogatepass"))
        names, deltas = fields[0], fields[1]
        file_ids = fields[2] if len(fields) > 2 else [None] * len(names)
    except (ValueError, zlib.error, IndexError, TypeError) as exc:
        raise ValueError(f"the scan window is not readable ({exc})") from None
    out: list[tuple[str, int, int | None]] = []
    mtime = 0
    base = 0
    for n, d, i in zip(names, deltas, file_ids, strict=True):
        mtime += int(d)
        if i is None:
            out.append((str(n), mtime, None))
        else:
            base += int(i)
            out.append((str(n), mtime, base))
    return out


#: The keys :meth:`ScanCursor.state` writes (an operator may nest them among its own).
_STATE_FIELDS = frozenset({"key", "floor", "window", "ahead", "census", "passed_over", "modified"})


def describe_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A short, readable form of a state holding a scan cursor's (for ``inspect``): the
    cursor's compressed window and census as counts, the operator's other keys as they are."""
    if "census" not in state:
        return dict(state)
    texts = [*(state.get("window") or ()), *(state.get("ahead") or ())]
    window = sum(len(_decode_names(t)) for t in texts)
    census = state.get("census")
    return {
        **{k: v for k, v in state.items() if k not in _STATE_FIELDS},
        "key": state.get("key"),
        "floor_mtime_ns": state.get("floor"),
        "names_in_window": window,
        "names_below_window": Census.decode(census).size if census is not None else None,
        "passed_over": state.get("passed_over", 0),
        "modified": state.get("modified", 0),
    }
