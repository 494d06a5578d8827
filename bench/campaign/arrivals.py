"""Input files placed the way landing directories see them, and a thread that keeps them coming."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

__all__ = ["Arrivals", "Feeder"]


class Arrivals:
    """Places input files the way landing directories see them: written under a hidden name,
    renamed into place; several files sharing one mtime; some late (an mtime older than files
    already placed, within ``late_s`` seconds)."""

    def __init__(self, directory: Path, rng: random.Random, *, late_s: float = 5.0) -> None:
        self.directory = directory
        self.rng = rng
        self.late_s = late_s
        self.expected: set[str] = set()
        self.files: list[str] = []
        self.newest_ns = time.time_ns()
        self.late = 0
        self._lock = threading.Lock()

    def place(self, lines: int, *, group: int = 1, late: bool = False) -> list[Path]:
        """``group`` files with one shared mtime (older than the newest when ``late``)."""
        with self._lock:
            if late:
                mtime = self.newest_ns - int(self.rng.uniform(0.5, self.late_s) * 1e9)
                self.late += group
            else:
                mtime = max(time.time_ns(), self.newest_ns)
                self.newest_ns = mtime
            placed = []
            for _ in range(group):
                index = len(self.files)
                name = f"in-{index:05d}.txt"
                records = [f"{name}:{i:05d}:{self.rng.getrandbits(32):08x}" for i in range(lines)]
                hidden = self.directory / f".{name}.tmp"
                hidden.write_text("\n".join(records) + "\n")
                os.utime(hidden, ns=(mtime, mtime))
                os.rename(hidden, self.directory / name)
                self.files.append(name)
                self.expected.update(records)
                placed.append(self.directory / name)
            return placed


class Feeder(threading.Thread):
    """Keeps files arriving until stopped: groups of 1-4 with one mtime, every 4th late."""

    def __init__(self, arrivals: Arrivals, *, lines: int, interval: float) -> None:
        super().__init__(name="feeder", daemon=True)
        self.arrivals = arrivals
        self.lines = lines
        self.interval = interval
        self.stop_event = threading.Event()

    def run(self) -> None:
        rng = self.arrivals.rng
        n = 0
        while not self.stop_event.wait(self.interval * rng.uniform(0.5, 1.5)):
            n += 1
            self.arrivals.place(self.lines, group=rng.randint(1, 4), late=n % 4 == 0)
