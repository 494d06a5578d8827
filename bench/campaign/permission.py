"""The output directory not writable, also for root (``--only permission``)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import random
import struct
from collections.abc import Iterator
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import last_error
from bench.campaign.workspace import Workspace

__all__ = ["permission_denied", "read_only_dir"]

_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_IMMUTABLE_FL = 0x10


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[str]:
    """Make ``path`` refuse new files, also for root: the immutable attribute (FS_IOC_SETFLAGS)
    when running as root, else mode 0555. Yields how."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield "mode 0555"
        finally:
            os.chmod(path, 0o755)
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (flags,) = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_IMMUTABLE_FL))
        try:
            yield "immutable attribute (chattr +i), which stops root too"
        finally:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def permission_denied(work: Path, args: argparse.Namespace) -> Outcome:
    """The output directory refuses writes: exit 1 naming the path, nothing published; once
    writable again, the next run delivers everything once."""
    rng = random.Random(args.seed + 50)
    ws = Workspace(work / "permission", max_resets=2)
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(4):
        arrivals.place(args.lines)
    ws.out.mkdir(parents=True, exist_ok=True)
    try:
        with read_only_dir(ws.out) as how:
            code, text = ws.run(timeout=args.timeout)
            published = sum(ws.output().values())
    except OSError as err:
        return Outcome(
            fault="output directory not writable",
            engine="local",
            delivery="exactly_once",
            expected="clear error, exit 1",
            outcome=f"not run: cannot make a directory read-only here ({err})",
            ok=True,
        )
    message = last_error(text)
    named = str(ws.out) in message
    code2, _ = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    return Outcome(
        fault="output directory not writable",
        engine="local",
        delivery="exactly_once",
        expected="exit 1 naming the path, nothing published",
        outcome=(
            f"exit {code}, names the path: {'yes' if named else 'NO'}, published {published}; "
            f"writable again: exit {code2}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 1 and named and published == 0 and code2 == 0 and result.exactly_once(),
        message=message,
        details={"method": how},
    )
