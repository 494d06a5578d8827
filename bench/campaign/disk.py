"""The output filesystem full: a small tmpfs, or injected ENOSPC where nothing can be mounted
(``--only disk``)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import last_error
from bench.campaign.workspace import Workspace

__all__ = ["disk_full", "disk_full_injected", "small_filesystem"]


@contextlib.contextmanager
def small_filesystem(path: Path, size_kb: int) -> Iterator[bool]:
    """A tmpfs of ``size_kb`` mounted at ``path`` when this process may mount (root with
    CAP_SYS_ADMIN); yields False when it may not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def disk_full(work: Path, args: argparse.Namespace) -> Outcome:
    """The output filesystem fills up: a clear error (exit 1); after space is freed the next
    run recovers and delivers everything once."""
    rng = random.Random(args.seed + 60)
    small = work / "small-fs"
    with small_filesystem(small, 1024) as mounted:
        if not mounted:
            return disk_full_injected(work, args)
        ws = Workspace(
            work / "disk",
            max_resets=2,
            output_dir=small / "out",
            checkpoint_dir=small / "ck",
            bytes_per_file=10**9,
        )
        arrivals = Arrivals(ws.landing, rng)
        for _ in range(12):
            arrivals.place(2000)  # about 70 kB each: more than the space left
        ballast = small / "ballast"
        with open(ballast, "wb") as f:
            f.write(b"\0" * (1024 - 400) * 1024)
        code, text = ws.run(timeout=args.timeout)
        message = last_error(text)
        clear = "No space left on device" in message or "ENOSPC" in message
        names_path = str(small) in message
        ballast.unlink()  # space freed
        code2, _ = ws.run(timeout=args.timeout)
        result = tally(arrivals.expected, ws.output())
        return Outcome(
            fault="disk full (1 MB tmpfs)",
            engine="local",
            delivery="exactly_once",
            expected="clear error, exit 1; recovery once space is freed",
            outcome=f"exit {code}, says no space: {'yes' if clear else 'NO'}, names the path: "
            f"{'yes' if names_path else 'NO'}; space freed: exit {code2}",
            lost=result.lost,
            duplicated=result.duplicated,
            corrupt=result.corrupt,
            ok=code == 1 and clear and code2 == 0 and result.exactly_once(),
            message=message,
            details={"method": "tmpfs of 1 MB, 624 kB of it taken by a ballast file"},
        )


def disk_full_injected(work: Path, args: argparse.Namespace) -> Outcome:
    """Where nothing can be mounted: the in-process runtime over a filesystem wrapper that
    answers ENOSPC once a write budget is spent; then the budget is lifted."""
    from operators.fs.local import LocalFileSystem
    from operators.scan import HDFS2DirectoryScan, ScanSettings
    from operators.sink import HDFS2FileSink, SinkSettings
    from operators.source import HDFS2FileSource, SourceSettings
    from region.checkpoint import CheckpointStore
    from region.errors import RegionFailedError
    from region.runtime import Pipeline, PipelineRunner
    from region.settings import RegionSettings

    class Budget:
        left = 300_000

    class Writer:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.path = inner.path

        def write(self, data: bytes) -> None:
            if Budget.left < len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
            Budget.left -= len(data)
            self.inner.write(data)

        def flush(self) -> None:
            self.inner.flush()

        def sync(self) -> None:
            self.inner.sync()

        def close(self) -> None:
            self.inner.close()

    class FullDisk(LocalFileSystem):
        def create(self, path: str, **kw: Any) -> Any:
            return Writer(super().create(path, **kw))

        def append(self, path: str) -> Any:
            return Writer(super().append(path))

    rng = random.Random(args.seed + 60)
    root = work / "disk-injected"
    (root / "landing").mkdir(parents=True)
    arrivals = Arrivals(root / "landing", rng)
    for _ in range(12):
        arrivals.place(2000)
    fs = FullDisk()

    def runner() -> PipelineRunner:
        scan = HDFS2DirectoryScan(ScanSettings(directory=str(root / "landing")), fs)
        source = HDFS2FileSource(SourceSettings(), fs, files=scan)
        sink = HDFS2FileSink(SinkSettings(file=str(root / "out" / "part-%FILENUM.txt")), fs)
        settings = RegionSettings(period=0.25, max_consecutive_reset_attempts=2)
        store = CheckpointStore(fs, str(root / "ck"))
        return PipelineRunner(Pipeline(source, sinks=[sink]), settings, store)

    message = ""
    try:
        runner().run(available_now=True)
        failed = False
    except RegionFailedError as exc:
        failed, message = True, str(exc)
    clear = "No space left on device" in message
    Budget.left = 1 << 40
    runner().run(available_now=True)
    ws_out = root / "out"
    got: Counter[str] = Counter()
    for p in ws_out.iterdir():
        if p.is_file() and not p.name.startswith((".", "_")):
            got.update(p.read_text().splitlines())
    result = tally(arrivals.expected, got)
    return Outcome(
        fault="disk full (injected ENOSPC)",
        engine="local (in-process)",
        delivery="exactly_once",
        expected="clear error; recovery once space is freed",
        outcome=f"region failed: {'yes' if failed else 'NO'}, says no space: "
        f"{'yes' if clear else 'NO'}; space freed: completed",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=failed and clear and result.exactly_once(),
        message=message,
        details={"method": "FileSystem wrapper raising ENOSPC past a write budget"},
    )
