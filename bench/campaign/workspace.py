"""A pipeline in a work directory: its settings file, its runs of ``hdfs-region run``, and what
it has published and checkpointed so far."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.campaign.processes import kill, track
from bench.common import REPO
from region.fs import FileSystem

__all__ = ["PACE_MODULE", "Workspace", "progressed"]

PACE_MODULE = '''\
"""Slows the pipeline down to a steady record rate, so that faults land mid-run."""
import os
import time

_RATE = float(os.environ.get("CAMPAIGN_RECORDS_PER_S", "0"))
_EVERY = max(1, int(_RATE / 100)) if _RATE > 0 else 0
_count = 0


def pace(record):
    global _count
    _count += 1
    if _EVERY and _count % _EVERY == 0:
        time.sleep(0.01)
    return record
'''


class Workspace:
    """Landing, output and checkpoint directories and the settings file of one pipeline.

    ``data_root`` is where the landing and output directories live on the local disk (the
    backing directory of the WebHDFS server for a ``webhdfs://`` pipeline).

    On a real cluster nothing mirrors the remote directories locally: ``remote_root`` is the
    directory on ``fs_uri`` that holds ``landing``, ``out`` and ``ck`` (default its root),
    ``remote_fs`` the filesystem through which :meth:`progress` and :meth:`output` read them,
    ``landing_uri`` a directory to scan instead of the remote landing (``file://`` + the local
    :attr:`landing`, where :class:`Arrivals` places files) and ``filesystem`` replaces or adds
    ``[filesystem]`` settings (``config_dir``, ``user``, ...).
    """

    def __init__(
        self,
        root: Path,
        *,
        engine: str = "local",
        delivery: str = "exactly_once",
        fs_uri: str | None = None,
        data_root: Path | None = None,
        remote_root: str = "",
        remote_fs: FileSystem | None = None,
        landing_uri: str | None = None,
        filesystem: dict[str, str | int] | None = None,
        records_per_s: float = 0.0,
        period: str = "250ms",
        late_window: str = "60s",
        sleep_time: str = "100ms",
        bytes_per_file: int | None = 60_000,
        time_per_file: str | None = None,
        on_decode_error: str = "fail",
        max_resets: int = 3,
        checkpoint_dir: Path | None = None,
        output_dir: Path | None = None,
        after_read: str = "keep",
        lock_ttl: str | None = None,
        close_idle_after: str | None = None,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self.delivery = delivery
        self.fs_uri = fs_uri
        self.remote_root = remote_root.rstrip("/")
        self.remote_fs = remote_fs
        self.landing_uri = landing_uri
        self.filesystem: dict[str, str | int] = {
            "uri": fs_uri or "",
            "user": "campaign",
            "timeout": "5s",
            "retries": 2,
            "retry_backoff": "200ms",
            "lease_recovery_timeout": "10s",
            **(filesystem or {}),
        }
        self.data_root = data_root if data_root is not None else root
        self.landing = self.data_root / "landing"
        self.out = output_dir if output_dir is not None else self.data_root / "out"
        if checkpoint_dir is not None:
            self.checkpoints = checkpoint_dir
        else:
            # On the pipeline's filesystem, as the settings file recommends.
            self.checkpoints = (self.data_root if fs_uri is not None else root) / "ck"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.records_per_s = records_per_s
        self.log = root / "runs.log"
        self.runs = 0
        (root / "campaign_pace.py").write_text(PACE_MODULE)
        self.settings: dict[str, Any] = {
            "period": period,
            "late_window": late_window,
            "sleep_time": sleep_time,
            "bytes_per_file": bytes_per_file,
            "time_per_file": time_per_file,
            "on_decode_error": on_decode_error,
            "max_resets": max_resets,
            "after_read": after_read,
            "lock_ttl": lock_ttl,
            "close_idle_after": close_idle_after,
        }
        #: Where ``after_read = "archive"`` moves the landing files.
        self.archive = self.data_root / "archive"
        self.write_config()

    def write_config(self, **changes: Any) -> None:
        self.settings.update(changes)
        s = self.settings
        remote = self.fs_uri is not None
        landing = self.remote_path("landing") if remote else str(self.landing)
        if self.landing_uri is not None:
            landing = self.landing_uri
        out = self.remote_path("out") if remote else str(self.out)
        lines = [
            f'engine = "{self.engine}"',
            "[region]",
            f'period = "{s["period"]}"',
            f'checkpoint_dir = "{self.remote_path("ck") if remote else self.checkpoints}"',
            f"max_consecutive_reset_attempts = {s['max_resets']}",
            'drain_timeout = "60s"',
            *([f'lock_ttl = "{s["lock_ttl"]}"'] if s["lock_ttl"] is not None else []),
            "[scan]",
            f'directory = "{landing}"',
            f'sleep_time = "{s["sleep_time"]}"',
            f'late_window = "{s["late_window"]}"',
            f'after_read = "{s["after_read"]}"',
            *([f'archive_dir = "{self.archive}"'] if s["after_read"] == "archive" else []),
            "[source]",
            f'on_decode_error = "{s["on_decode_error"]}"',
            "[sink]",
            f'file = "{out}/part-%FILENUM.txt"',
            f'delivery = "{self.delivery}"',
            *(
                [f'close_idle_after = "{s["close_idle_after"]}"']
                if s["close_idle_after"] is not None
                else []
            ),
        ]
        # One file limit (they exclude each other).
        if s["time_per_file"] is not None:
            lines.append(f'time_per_file = "{s["time_per_file"]}"')
        elif s["bytes_per_file"] is not None:
            lines.append(f"bytes_per_file = {s['bytes_per_file']}")
        if self.engine == "local":
            lines += ["[transform]", 'function = "campaign_pace:pace"']
        if remote:
            lines.append("[filesystem]")
            lines += [
                f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}"
                for key, value in self.filesystem.items()
            ]
        if self.engine == "spark":
            lines += ["[spark]", 'master = "local[2]"']
        (self.root / "pipeline.toml").write_text("\n".join(lines) + "\n")

    def command(self, *, available_now: bool) -> list[str]:
        cmd = [sys.executable, "-m", "operators.app", "run", str(self.root / "pipeline.toml")]
        cmd += ["--no-progress", "--log-level", "INFO"]
        return cmd + (["--available-now"] if available_now else [])

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CAMPAIGN_RECORDS_PER_S"] = str(self.records_per_s)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env

    def start(
        self,
        *,
        available_now: bool = False,
        paced: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a run in its own process group (a kill takes Spark's JVM down with it).
        ``paced``: at ``records_per_s`` (so that faults land mid-run), else at full speed;
        ``env``: added to the run's environment."""
        self.runs += 1
        env = {**self._env(), **(env or {})}
        if not paced:
            env["CAMPAIGN_RECORDS_PER_S"] = "0"
        with open(self.log, "ab") as log:
            log.write(f"\n===== run {self.runs} {time.strftime('%H:%M:%S')}\n".encode())
            proc = subprocess.Popen(
                self.command(available_now=available_now),
                cwd=self.root,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        track(proc)
        return proc

    def run(self, *, timeout: float = 300.0, paced: bool = False) -> tuple[int, str]:
        """Run ``--available-now`` to the end; (exit code, what it printed)."""
        start = self.log.stat().st_size if self.log.exists() else 0
        proc = self.start(available_now=True, paced=paced)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
            msg = f"{self.root.name}: a run did not end within {timeout:.0f} s"
            raise RuntimeError(msg) from None
        with open(self.log, "rb") as f:
            f.seek(start)
            return code, f.read().decode(errors="replace")

    def remote_path(self, name: str) -> str:
        """``landing``, ``out`` or ``ck`` on the pipeline's remote filesystem."""
        return f"{self.remote_root}/{name}"

    def _remote_names(self, name: str) -> list[str]:
        assert self.remote_fs is not None
        try:
            return [s.name for s in self.remote_fs.list_dir(self.remote_path(name))]
        except FileNotFoundError:
            return []

    def progress(self) -> int:
        """How many cuts (local) or committed batches (Spark) exist so far."""
        if self.engine == "spark":
            commits = self.checkpoints / "spark" / "commits"
            ids = [int(p.name) for p in commits.glob("[0-9]*")] if commits.exists() else []
            return max(ids, default=-1) + 1
        if self.remote_fs is not None:
            names = self._remote_names("ck")
        else:
            names = [p.name for p in self.checkpoints.glob("cut-*.json")]
        ids = [int(n[4:16]) for n in names if n.startswith("cut-") and n.endswith(".json")]
        return max(ids, default=0)

    def output_names(self) -> set[str]:
        """The names of the published output files (``part-*``)."""
        if self.remote_fs is not None:
            return {n for n in self._remote_names("out") if n.startswith("part-")}
        return {p.name for p in self.out.glob("part-*")} if self.out.exists() else set()

    def output(self) -> Counter[str]:
        """Every record a plain directory reader sees (hidden ``.``/``_`` names skipped)."""
        got: Counter[str] = Counter()
        if self.remote_fs is not None:
            out = self.remote_path("out")
            for name in sorted(self._remote_names("out")):
                if not name.startswith((".", "_")):
                    data = self.remote_fs.read(f"{out}/{name}")
                    got.update(data.decode("utf-8", "replace").splitlines())
            return got
        return self.read_output(self.out)

    @staticmethod
    def read_output(directory: Path, *, prefix: str = "") -> Counter[str]:
        """The records of the files under a local ``directory`` whose names start with
        ``prefix``, as a plain reader sees them (hidden ``.``/``_`` names skipped)."""
        got: Counter[str] = Counter()
        if not directory.exists():
            return got
        for path in directory.rglob(f"{prefix}*"):
            rel = path.relative_to(directory).parts
            if path.is_file() and not any(p.startswith((".", "_")) for p in rel):
                got.update(path.read_bytes().decode("utf-8", "replace").splitlines())
        return got

    def newest_cut(self) -> Path | None:
        cuts = sorted(self.checkpoints.glob("cut-*.json"))
        return cuts[-1] if cuts else None


def progressed(ws: Workspace, proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """For :func:`~bench.campaign.processes.wait_for`: ``proc`` has made a cut (a batch on
    Spark) beyond those made so far, or has ended."""
    before = ws.progress()
    return lambda: ws.progress() > before or proc.poll() is not None
