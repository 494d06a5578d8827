"""The scan cursor: which files of a directory listing are new. One rule for both engines.

Files are emitted in the strict order (mtime_ns, name); the *key* is the greatest file emitted.
A file is new when

1. it sorts after the key; or
2. its mtime is within the late window below the key (at or after the *floor*) and its name is
   not among the names emitted there (the *window*, kept by name); or
3. its mtime is below the floor and the file was never accounted for: while the scan runs, a
   name absent from the previous listing; after a restart, a name the *census* (a fixed-size
   summary of every name accounted for below the floor, :mod:`operators.census`) does not hold.

Case 3 is how a file that lands late, by any amount (``cp -p``, ``distcp -p``, write elsewhere
then rename), is still read once. With ``late_window = 0`` (strict, as IBM Streams' scan) no
file that sorts before the key is read: such a file is *passed over*. A file is also passed
over when, after a restart, more files below the floor changed than the census can tell apart.
Passing over is never silent: a WARNING names the file (or the count) and its lateness, the
count is in the state (``passed_over``), and ``on_late_file = "fail"`` makes it an error.

State (plain values, JSON)::

    {"key": {"mtime_ns", "name"} | null, "floor": int | null, "window": {bucket: text},
     "census": text | null, "passed_over": int}

The window is stored in buckets of mtime so that a cut encodes only the buckets that changed.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import logging
import operator
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from operators.census import Census, name_key
from operators.errors import OperatorError
from region.fs import ListingEntry

__all__ = ["LateFileError", "ScanCursor", "describe_state"]

logger = logging.getLogger(__name__)

_NS = 1_000_000_000
_mtime_and_name = operator.itemgetter(0, 1)
_name = operator.itemgetter(1)
#: Buckets per window: a cut re-encodes about 1/64 of the window's names (two buckets at most).
_BUCKETS = 64


class LateFileError(OperatorError):
    """A file would be passed over and ``on_late_file = "fail"``."""


def _seconds(ns: int) -> str:
    return f"{ns / _NS:.3f}s"


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
        name: str = "scan",
        display: Callable[[str], str] = str,
    ) -> None:
        self.window_ns = max(0, window_ns)
        self.on_late_file = on_late_file
        self.name = name
        self._display = display
        self._width = max(self.window_ns // _BUCKETS, _NS)
        self.passed_over_now = 0  # this object's count (metrics), not state
        self.reset(None)

    # -- state ------------------------------------------------------------------------------

    def reset(self, state: Mapping[str, Any] | None) -> None:
        """Restore ``state`` (``None``: nothing emitted yet); forget every listing."""
        self.key: tuple[int, str] | None = None
        self.floor: int | None = None
        # Names emitted at or above the floor (name -> mtime), indexed by mtime bucket.
        self._window: dict[str, int] = {}
        self._buckets: dict[int, set[str]] = {}
        self._encoded: dict[int, str] = {}
        self.census: Census | None = Census()
        self.passed_over = 0
        # Names of the last listing that are accounted for (emitted, or not new); None after a
        # reset: the next listing is checked against the census instead.
        self._seen: set[str] | None = None
        if state is None:
            return
        key = state.get("key")
        if key is not None:
            self.key = (int(key["mtime_ns"]), str(key["name"]))
        if "census" not in state:
            # A checkpoint of the earlier format: {"key", "late": {name: mtime_ns}}.
            self.census = None
            for n, m in (state.get("late") or {}).items():
                self._put(str(n), int(m))
            self.floor = None if self.key is None else self._floor_for(self.key)
        else:
            census = state.get("census")
            self.census = Census.decode(census) if census is not None else None
            floor = state.get("floor")
            self.floor = None if floor is None else int(floor)
            for text in (state.get("window") or {}).values():
                for n, m in _decode_names(text):
                    self._put(n, m)
            self.passed_over = int(state.get("passed_over", 0))
        if self.key is not None:
            self._advance_floor()

    def state(self) -> dict[str, Any]:
        """The state as plain values; buckets unchanged since the last call are not encoded."""
        window = {}
        for bucket, names in self._buckets.items():
            text = self._encoded.get(bucket)
            if text is None:
                text = self._encoded[bucket] = _encode_names({n: self._window[n] for n in names})
            window[str(bucket)] = text
        return {
            "key": None if self.key is None else {"mtime_ns": self.key[0], "name": self.key[1]},
            "floor": self.floor,
            "window": window,
            "census": None if self.census is None else self.census.encode(),
            "passed_over": self.passed_over,
        }

    def forget(self) -> None:
        """Forget the listing (after a reset elsewhere): the next one is checked by census."""
        self._seen = None

    @property
    def window_size(self) -> int:
        return len(self._window)

    # -- the rule ---------------------------------------------------------------------------

    def is_late(self, entry: ListingEntry) -> bool:
        """Whether a new file sorts before the key (it is emitted whole, out of order)."""
        return self.key is not None and (entry[0], entry[1]) < self.key

    def new_files(self, listing: list[ListingEntry]) -> list[ListingEntry]:
        """The new files of ``listing`` (sorted by (mtime_ns, name)), in that order.

        Files that can only be passed over are reported here (WARNING, count, or
        :class:`LateFileError`) and accounted for, so they are reported once.
        """
        key = self.key
        seen = self._seen
        names = set(map(_name, listing))
        if key is None:
            self._seen = set()
            return list(listing)
        if seen is not None:
            self._drop_vanished(seen - names)
            fresh = names - seen
        else:
            fresh = self._check_census(listing)
        low, after_key = self._regions(listing)
        out = [e for e in listing[:low] if e[1] in fresh]
        if out and self.window_ns == 0:
            self._pass_over(out)
            out = []
        window = self._window
        out += [e for e in listing[low:after_key] if e[1] not in window]
        out += listing[after_key:]
        self._seen = names.difference(e[1] for e in out)
        return out

    def emit(self, entry: ListingEntry) -> None:
        """Account for ``entry`` as emitted (call it where the next cut covers the emission)."""
        mtime, name = entry[0], entry[1]
        if self._seen is not None:
            self._seen.add(name)
        key = self.key
        if key is None or (mtime, name) > key:
            self.key = (mtime, name)
            if self.floor is None:
                self.floor = self._floor_for(self.key)
        if self.floor is not None and mtime < self.floor:
            if self.census is not None:
                self.census.add(name)
        else:
            self._put(name, mtime)
        self._advance_floor()

    # -- steps ------------------------------------------------------------------------------

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
        limit = floor // self._width
        window = self._window
        for bucket in [b for b in self._buckets if b <= limit]:
            for n in [n for n in self._buckets[bucket] if window[n] < floor]:
                self._drop(n)
                if self.census is not None:
                    self.census.add(n)

    def _put(self, name: str, mtime: int) -> None:
        if name in self._window:
            self._drop(name)
        self._window[name] = mtime
        bucket = mtime // self._width
        self._buckets.setdefault(bucket, set()).add(name)
        self._encoded.pop(bucket, None)

    def _drop(self, name: str) -> None:
        bucket = self._window.pop(name) // self._width
        names = self._buckets[bucket]
        names.discard(name)
        self._encoded.pop(bucket, None)
        if not names:
            del self._buckets[bucket]

    def _drop_vanished(self, gone: Iterable[str]) -> None:
        """Names accounted for that left the directory leave the window or the census."""
        for n in gone:
            if n in self._window:
                self._drop(n)
            elif self.census is not None:
                self.census.remove(n)

    def _check_census(self, listing: list[ListingEntry]) -> set[str]:
        """After a reset: the names below the floor never accounted for (census difference)."""
        assert self.floor is not None
        floor = self.floor
        window = self._window
        below = [e[1] for e in listing[: self._regions(listing)[0]] if e[1] not in window]
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
            return set()
        diff = current.subtract(previous)
        by_key = {name_key(n): n for n in below} if diff.added else {}
        fresh = {by_key[k] for k in diff.added if k in by_key}
        for n in fresh:
            current.remove(n)
        self.census = current
        if not diff.complete:
            unknown = max(1, diff.net - len(fresh) + len(diff.removed))
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
        return fresh

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


def _encode_names(names: Mapping[str, int]) -> str:
    items = sorted(names.items(), key=lambda item: (item[1], item[0]))
    mtimes = [m for _, m in items]
    deltas = mtimes[:1] + [b - a for a, b in itertools.pairwise(mtimes)]
    raw = json.dumps([[n for n, _ in items], deltas], separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(zlib.compress(raw.encode("utf-8", "surrogatepass"), 1)).decode()


def _decode_names(text: str) -> list[tuple[str, int]]:
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
        names, deltas = json.loads(raw.decode("utf-8", "surrogatepass"))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"the scan window is not readable ({exc})") from None
    out = []
    mtime = 0
    for n, d in zip(names, deltas, strict=True):
        mtime += int(d)
        out.append((str(n), mtime))
    return out


def describe_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A short, readable form of a scan cursor's state (for ``inspect``)."""
    if "census" not in state:
        return dict(state)
    window = sum(len(_decode_names(t)) for t in (state.get("window") or {}).values())
    census = state.get("census")
    return {
        "key": state.get("key"),
        "floor_mtime_ns": state.get("floor"),
        "names_in_window": window,
        "names_below_window": Census.decode(census).size if census is not None else None,
        "passed_over": state.get("passed_over", 0),
    }
