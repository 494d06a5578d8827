"""The scan's control input as a file: how a running job is told to watch another directory
(``hdfs-region switch``), or to list its directory again at once.

A request is one small JSON file, ``{"seq": int, "directory": str}``, replaced atomically by
each request (:func:`request_switch`). The scan reads it (:class:`ControlFile`) under a permit,
at most every ``poll`` seconds, and applies a request whose ``seq`` is greater than the last one
it applied; that ``seq`` is part of the scan's state. So a switch is recorded by the next cut,
and a switch a reset or a crash took back (applied after the last cut) is applied again: the
file stays where it is, and a restart keeps the switched directory.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from region.atomic import write_atomically
from region.fs import FileSystem

__all__ = ["CONTROL_FILE", "ControlFile", "SwitchRequest", "read_switch", "request_switch"]

logger = logging.getLogger(__name__)

#: The control file's name in the job's checkpoint directory.
CONTROL_FILE = "control.json"


@dataclass(frozen=True)
class SwitchRequest:
    seq: int
    directory: str


def read_switch(fs: FileSystem, path: str) -> SwitchRequest | None:
    """The request in ``path``; ``None`` when there is none. ValueError naming the file when it
    is not a request (it is only ever written whole, so that is someone else's file)."""
    try:
        data = fs.read(path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data)
        return SwitchRequest(int(record["seq"]), str(record["directory"]))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        msg = f"control file {fs.display(path)} is not a switch request ({exc!r}): remove it"
        raise ValueError(msg) from None


def request_switch(
    fs: FileSystem, path: str, directory: str, *, permission: int | None = 0o640
) -> SwitchRequest:
    """Write a request to watch ``directory`` (the same directory: list it again at once). Its
    ``seq`` follows the previous request's and the clock, so two requests racing each other
    are both seen as new."""
    try:
        previous = read_switch(fs, path)
    except ValueError:
        previous = None  # overwritten by a valid request
    seq = max(time.time_ns(), previous.seq + 1 if previous is not None else 0)
    request = SwitchRequest(seq, directory)
    body = json.dumps({"seq": seq, "directory": directory}) + "\n"
    write_atomically(fs, path, body.encode(), overwrite=True, permission=permission)
    return request


class ControlFile:
    """Where a scan polls for switch requests: ``path`` on ``fs``, at most every ``poll``
    seconds (a stat-and-read on a remote filesystem is not free)."""

    def __init__(self, fs: FileSystem, path: str, *, poll: float = 1.0) -> None:
        self.fs = fs
        self.path = path
        self.poll = poll

    def read(self) -> SwitchRequest | None:
        try:
            return read_switch(self.fs, self.path)
        except ValueError as exc:
            logger.error("%s", exc)
            return None
