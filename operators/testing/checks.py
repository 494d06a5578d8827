"""Does the published output keep the sink's promise? Comparisons and readable explanations.

The expected output of each input file is the bytes the sink writes for its transformed records,
in order. Because one source reads one file after another, an exactly-once output is those
per-file byte strings concatenated in some file order (the scan's order, which late files
change), each exactly once; published files are read in natural name order (part-2 before
part-10). At-least-once output is any sequence of whole transformed records that contains each
one at least as often as the input does.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from region.fs import FileSystem

__all__ = [
    "Expected",
    "Published",
    "at_least_once_problems",
    "exactly_once_problems",
    "fits_exactly_once",
    "natural_key",
    "read_published",
    "record_problems",
]


def natural_key(path: str) -> list[int | str]:
    """Numbers compare as numbers: ``part-2`` before ``part-10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


@dataclass(frozen=True)
class Published:
    """What a plain directory reader sees: non-hidden files (and directories), name order."""

    files: tuple[tuple[str, bytes], ...]
    hidden: tuple[str, ...]

    @property
    def stream(self) -> bytes:
        return b"".join(data for _, data in self.files)

    def describe(self, limit: int = 8) -> str:
        shown = [f"{name} ({len(data)} bytes)" for name, data in self.files[:limit]]
        if len(self.files) > limit:
            shown.append(f"... {len(self.files) - limit} more")
        return ", ".join(shown) or "none"


def read_published(fs: FileSystem, directory: str, *, bom: bytes = b"") -> Published:
    """Every visible file under ``directory`` (recursively), a byte-order mark stripped."""
    files: list[tuple[str, bytes]] = []
    hidden: list[str] = []
    todo = [""]
    while todo:
        rel = todo.pop()
        here = directory.rstrip("/") + ("/" + rel if rel else "")
        try:
            entries = fs.list_dir(here)
        except FileNotFoundError:
            continue
        for status in entries:
            name = status.name
            path = f"{rel}/{name}" if rel else name
            if name.startswith((".", "_")):
                hidden.append(path)
            elif status.is_dir:
                todo.append(path)
            else:
                data = fs.read(status.path)
                if bom and data.startswith(bom):
                    data = data[len(bom) :]
                files.append((path, data))
    files.sort(key=lambda item: natural_key(item[0]))
    return Published(tuple(files), tuple(sorted(hidden)))


@dataclass
class Expected:
    """Per input file: its transformed records as the sink writes them (``tokens``).

    ``optional`` files are ones the scan does not promise to read (late beyond its window):
    they may be missing, but never duplicated.
    """

    tokens: dict[str, list[bytes]] = field(default_factory=dict)
    optional: set[str] = field(default_factory=set)
    #: How a token reads in a report (the transformed record's repr).
    shown: dict[bytes, str] = field(default_factory=dict)
    #: Where a token comes from: (input file, record index).
    origin: dict[bytes, list[tuple[str, int]]] = field(default_factory=dict)

    def add(
        self, name: str, tokens: Sequence[bytes], shown: Sequence[str], *, optional: bool
    ) -> None:
        self.tokens[name] = list(tokens)
        if optional:
            self.optional.add(name)
        for index, (token, text) in enumerate(zip(tokens, shown, strict=True)):
            self.shown.setdefault(token, text)
            self.origin.setdefault(token, []).append((name, index))

    def file_bytes(self, *, optional: bool) -> Counter[bytes]:
        return Counter(
            b"".join(tokens)
            for name, tokens in self.tokens.items()
            if (name in self.optional) == optional
        )

    def record_counts(self, *, optional: bool) -> Counter[bytes]:
        counts: Counter[bytes] = Counter()
        for name, tokens in self.tokens.items():
            if (name in self.optional) == optional:
                counts.update(tokens)
        return counts

    def where(self, token: bytes) -> str:
        places = self.origin.get(token, [])
        if not places:
            return ""
        name, index = places[0]
        more = f" and {len(places) - 1} more" if len(places) > 1 else ""
        return f" (record {index} of {name}{more})"


def fits_exactly_once(
    stream: bytes,
    required: Mapping[bytes, int],
    optional: Mapping[bytes, int],
    *,
    partial: bool = False,
) -> bool:
    """Whether ``stream`` is a concatenation of the pieces, each required piece exactly as often
    as counted and each optional one at most as often. ``partial``: a moment while running, so
    required pieces may be missing and the stream may end inside one more piece."""
    values = sorted(v for v in set(required) | set(optional) if v)
    limit = tuple(required.get(v, 0) + optional.get(v, 0) for v in values)
    need = tuple(required.get(v, 0) for v in values)

    @functools.cache
    def go(pos: int, used: tuple[int, ...]) -> bool:
        if pos == len(stream):
            return partial or all(u >= n for u, n in zip(used, need, strict=True))
        for i, value in enumerate(values):
            if used[i] >= limit[i]:
                continue
            if stream.startswith(value, pos):
                if go(pos + len(value), (*used[:i], used[i] + 1, *used[i + 1 :])):
                    return True
            elif partial and value.startswith(stream[pos:]):
                return True
        return False

    return go(0, (0,) * len(values))


def _parse_from(stream: bytes, start: int, ordered: list[bytes]) -> tuple[list[bytes], int]:
    """Tokens of the longest parsable run of ``stream`` from ``start``, and where it ends."""
    n = len(stream)
    back: dict[int, bytes] = {}
    reach = {start}
    farthest = start
    for pos in range(start, n):
        if pos not in reach:
            continue
        for token in ordered:
            end = pos + len(token)
            if end <= n and end not in reach and stream.startswith(token, pos):
                reach.add(end)
                back[end] = token
                farthest = max(farthest, end)
    end = n if n in reach else farthest
    out: list[bytes] = []
    pos = end
    while pos > start:
        piece = back[pos]
        out.append(piece)
        pos -= len(piece)
    out.reverse()
    return out, end


def _tokenize(stream: bytes, tokens: set[bytes]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Split ``stream`` into tokens; bytes that fit no token are skipped up to the next place a
    token starts and returned as ``(start, end)`` garbage spans."""
    ordered = sorted((t for t in tokens if t), key=len, reverse=True)
    out: list[bytes] = []
    garbage: list[tuple[int, int]] = []
    pos = 0
    while pos < len(stream):
        found, end = _parse_from(stream, pos, ordered)
        out += found
        if end >= len(stream):
            break
        resume = next(
            (
                q
                for q in range(end + 1, len(stream))
                if any(stream.startswith(t, q) for t in ordered)
            ),
            len(stream),
        )
        garbage.append((end, resume))
        pos = resume
    return out, garbage


def _short_bytes(data: bytes, limit: int = 60) -> str:
    return repr(data[:limit]) + ("..." if len(data) > limit else "")


def _show(tokens: Counter[bytes], expected: Expected, limit: int = 6, *, times: bool) -> str:
    items = []
    for token, count in list(tokens.items())[:limit]:
        text = expected.shown.get(token, repr(token))
        items.append(f"{text}{f' x{count}' if times else ''}{expected.where(token)}")
    if len(tokens) > limit:
        items.append(f"... {len(tokens) - limit} more")
    return "; ".join(items)


def _record_problems(
    stream: bytes, expected: Expected, *, duplicates_allowed: bool
) -> tuple[list[str], bool]:
    """Missing / duplicated / unexpected records; and whether the stream parsed into records."""
    required = expected.record_counts(optional=False)
    optional = expected.record_counts(optional=True)
    tokens, garbage = _tokenize(stream, set(required) | set(optional))
    got = Counter(tokens)
    problems: list[str] = []
    missing = required - got
    if missing:
        problems.append(
            f"missing ({sum(missing.values())}): {_show(missing, expected, times=False)}"
        )
    if not duplicates_allowed:
        allowed = required + optional
        seen = Counter({t: c for t, c in got.items() if c > allowed[t]})
        if seen:
            extra = sum(c - allowed[t] for t, c in seen.items())
            problems.append(f"duplicated ({extra} extra): {_show(seen, expected, times=True)}")
    for start, end in garbage[:3]:
        problems.append(
            f"not a record: {_short_bytes(stream[start:end])} at byte {start} of the published "
            "output (a torn or foreign write)"
        )
    if len(garbage) > 3:
        problems.append(f"... and {len(garbage) - 3} more pieces that are not records")
    return problems, not garbage


def exactly_once_problems(stream: bytes, expected: Expected, *, partial: bool = False) -> list[str]:
    """Why ``stream`` is not the expected output exactly once (empty when it is)."""
    required = expected.file_bytes(optional=False)
    optional = expected.file_bytes(optional=True)
    if fits_exactly_once(stream, required, optional, partial=partial):
        return []
    if partial:
        # A moment while running: only duplicates and garbage are wrong, not missing records.
        only = Expected(expected.tokens, set(expected.tokens), expected.shown, expected.origin)
        problems, _ = _record_problems(stream, only, duplicates_allowed=False)
        problems = [p for p in problems if not p.startswith("missing")]
    else:
        problems, _ = _record_problems(stream, expected, duplicates_allowed=False)
    if not problems:
        problems.append(
            "every record is there the right number of times, but not in order: each input "
            "file's records must appear in input order, one file after another"
        )
    return problems


def at_least_once_problems(stream: bytes, expected: Expected) -> list[str]:
    """Why ``stream`` does not cover the expected output with whole records (empty when it does)."""
    problems, _ = _record_problems(stream, expected, duplicates_allowed=True)
    return problems


def record_problems(stream: bytes, expected: Expected, *, partial: bool = False) -> list[str]:
    """Why ``stream`` does not hold every expected record exactly once, in any order (a sink
    whose records name their files spreads an input file over several output files). ``partial``:
    a moment while running, so records may still be missing."""
    if partial:
        expected = Expected(expected.tokens, set(expected.tokens), expected.shown, expected.origin)
    problems, _ = _record_problems(stream, expected, duplicates_allowed=False)
    return problems
