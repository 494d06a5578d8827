"""File-name templates of the file sink: IBM's variables and Java ``SimpleDateFormat`` times.

Variables: ``%HOST`` (host name), ``%PROCID`` (process id), ``%PEID`` and ``%PELAUNCHNUM``
(processing element id and relaunch count, given by the runtime), ``%TIME`` (the file's creation
time in ``time_format``), ``%FILENUM`` (0, 1, 2, ... per new file) and ``%PARTITION`` (the Spark
task partition; 0 when there is none). ``%%`` is a literal ``%``; any other ``%`` token is an error.

``time_format`` is a ``strftime`` format when it contains ``%`` (``%f`` works), otherwise a Java
``SimpleDateFormat`` pattern such as ``yyyyMMdd_HHmmss`` or ``yyyy-MM-dd'T'HH.mm.ss.SSS``.
Times are local, as in Java; month and day names are English.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from datetime import datetime

from region.errors import ConfigError

__all__ = ["VARIABLES", "FileNameTemplate", "JavaTimeFormat"]

VARIABLES = ("HOST", "PROCID", "PEID", "PELAUNCHNUM", "TIME", "FILENUM", "PARTITION")

# Longest names first so a name that is a prefix of another can never shadow it.
_TOKEN = re.compile(
    "%(?:(%)|(" + "|".join(sorted(VARIABLES, key=len, reverse=True)) + r")|([A-Za-z0-9_]*))"
)

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

_Field = Callable[[datetime], str]


def _number(value: Callable[[datetime], int], width: int) -> _Field:
    return lambda t: str(value(t)).zfill(width)


def _offset(t: datetime, sep: str) -> str:
    delta = t.utcoffset()
    minutes = int(delta.total_seconds() // 60) if delta is not None else 0
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{sep}{mins:02d}"


def _iso_offset(count: int) -> _Field:
    def render(t: datetime) -> str:
        delta = t.utcoffset()
        if delta is not None and not delta:
            return "Z"
        full = _offset(t, ":" if count >= 3 else "")
        return full[:3] if count == 1 else full

    return render


def _java_field(letter: str, count: int) -> _Field | None:
    """The renderer of a run of ``count`` pattern letters, as Java's SimpleDateFormat does."""
    if letter == "y":
        if count == 2:
            return lambda t: f"{t.year % 100:02d}"
        return _number(lambda t: t.year, count)
    if letter == "Y":  # week year, a common typo for y that Java accepts
        if count == 2:
            return lambda t: f"{t.isocalendar()[0] % 100:02d}"
        return _number(lambda t: t.isocalendar()[0], count)
    if letter in "ML":
        if count >= 4:
            return lambda t: _MONTHS[t.month - 1]
        if count == 3:
            return lambda t: _MONTHS[t.month - 1][:3]
        return _number(lambda t: t.month, count)
    if letter == "E":
        if count >= 4:
            return lambda t: _DAYS[t.weekday()]
        return lambda t: _DAYS[t.weekday()][:3]
    if letter == "a":
        return lambda t: "AM" if t.hour < 12 else "PM"
    if letter == "G":
        return lambda t: "AD"
    if letter == "z":
        return lambda t: t.tzname() or _offset(t, "")
    if letter == "Z":
        return lambda t: _offset(t, "")
    if letter == "X":
        return _iso_offset(count)
    numbers: dict[str, Callable[[datetime], int]] = {
        "d": lambda t: t.day,
        "D": lambda t: t.timetuple().tm_yday,
        "u": lambda t: t.isoweekday(),
        "w": lambda t: t.isocalendar()[1],
        "H": lambda t: t.hour,
        "k": lambda t: t.hour or 24,
        "K": lambda t: t.hour % 12,
        "h": lambda t: t.hour % 12 or 12,
        "m": lambda t: t.minute,
        "s": lambda t: t.second,
        # Java's S is milliseconds, zero-padded to the letter count (SSSSSS is not microseconds).
        "S": lambda t: t.microsecond // 1000,
    }
    value = numbers.get(letter)
    return None if value is None else _number(value, count)


class JavaTimeFormat:
    """A compiled Java ``SimpleDateFormat`` pattern (formatting only)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._parts: list[str | _Field] = []
        i, n = 0, len(pattern)
        while i < n:
            char = pattern[i]
            if char == "'":
                if pattern.startswith("''", i):
                    self._parts.append("'")
                    i += 2
                    continue
                end = i + 1
                text = []
                while True:
                    quote = pattern.find("'", end)
                    if quote < 0:
                        msg = f"time format {pattern!r}: quote at position {i} is never closed"
                        raise ConfigError(msg)
                    text.append(pattern[end:quote])
                    if pattern.startswith("''", quote):  # '' inside quotes is one quote
                        text.append("'")
                        end = quote + 2
                        continue
                    break
                self._parts.append("".join(text))
                i = quote + 1
            elif char.isascii() and char.isalpha():
                j = i
                while j < n and pattern[j] == char:
                    j += 1
                field = _java_field(char, j - i)
                if field is None:
                    msg = (
                        f"time format {pattern!r}: pattern letter {char!r} is not supported "
                        "(use y M d H m s S E a D u w k K h z Z X, or quote literal text in '')"
                    )
                    raise ConfigError(msg)
                self._parts.append(field)
                i = j
            else:
                self._parts.append(char)
                i += 1

    def format(self, t: datetime) -> str:
        return "".join(p if isinstance(p, str) else p(t) for p in self._parts)


class FileNameTemplate:
    """A file-name template; :meth:`render` gives the name of one new file."""

    def __init__(self, template: str, time_format: str = "yyyyMMdd_HHmmss") -> None:
        self.template = template
        self.time_format = time_format
        self._java = None if "%" in time_format else JavaTimeFormat(time_format)
        if self._java is None:
            try:
                datetime.fromtimestamp(0).strftime(time_format)
            except ValueError as exc:
                msg = f"time format {time_format!r} is not a valid strftime format: {exc}"
                raise ConfigError(msg) from None
        self._parts: list[tuple[bool, str]] = []  # (is_variable, text)
        pos = 0
        for match in _TOKEN.finditer(template):
            literal = template[pos : match.start()]
            percent, variable, unknown = match.groups()
            if percent:
                literal += "%"
            elif variable is None:
                token = "%" + unknown if unknown else template[match.start() : match.start() + 2]
                msg = (
                    f"file name template {template!r}: unknown variable {token!r} "
                    f"(known: {', '.join('%' + v for v in VARIABLES)}; write %% for a literal %)"
                )
                raise ConfigError(msg)
            if literal:
                self._parts.append((False, literal))
            if variable:
                self._parts.append((True, variable))
            pos = match.end()
        if pos < len(template):
            self._parts.append((False, template[pos:]))
        self.variables = frozenset(text for is_var, text in self._parts if is_var)
        self.uses_filenum = "FILENUM" in self.variables
        self.uses_time = "TIME" in self.variables
        self.uses_partition = "PARTITION" in self.variables
        #: The literal text before the first variable (the whole name when there is none).
        self.static_prefix = ""
        for is_var, text in self._parts:
            if is_var:
                break
            self.static_prefix += text

    def __repr__(self) -> str:
        return f"FileNameTemplate({self.template!r}, {self.time_format!r})"

    def format_time(self, now: float) -> str:
        """``now`` (seconds since the epoch) in ``time_format``, local time."""
        t = datetime.fromtimestamp(now).astimezone()
        if self._java is not None:
            return self._java.format(t)
        return t.strftime(self.time_format)

    def render(
        self,
        *,
        filenum: int,
        now: float,
        partition: int | None = None,
        peid: str = "0",
        pelaunchnum: int = 0,
    ) -> str:
        """The name of a new file: ``filenum`` for %FILENUM, ``now`` for %TIME."""
        values = {
            "FILENUM": str(filenum),
            "PARTITION": str(partition if partition is not None else 0),
            "PEID": str(peid),
            "PELAUNCHNUM": str(pelaunchnum),
        }
        out = []
        for is_var, text in self._parts:
            if not is_var:
                out.append(text)
            elif text == "HOST":
                out.append(socket.gethostname())
            elif text == "PROCID":
                out.append(str(os.getpid()))
            elif text == "TIME":
                out.append(self.format_time(now))
            else:
                out.append(values[text])
        return "".join(out)
