"""One checkpoint directory, one job: through the real ``hdfs-region run`` (local engine) in
subprocesses. A second process fails at start naming the holder; a SIGKILLed holder never leaves
the directory stuck (taken over at once when its process is provably gone, after its ttl when it
ran elsewhere); another pipeline pointed at the directory is refused and changes nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import time
from pathlib import Path

from region.lock import LockHolder
from tests.cli.conftest import cut_files, start_cli, wait_for

from .conftest import run_cli

SETTINGS = """\
    engine = "local"
    [region]
    period = "50ms"
    checkpoint_dir = "shared"
    lock_ttl = "{ttl}"
    [scan]
    directory = "landing"
    sleep_time = "50ms"
    [sink]
    file = "{out}/part-%FILENUM.txt"
    tuples_per_file = 40
"""


def setup(root: Path, *, files: int = 3, lines: int = 30) -> list[str]:
    landing = root / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(files):
        rows = [f"f{i}-{j:03d}" for j in range(lines)]
        (landing / f"f{i}.txt").write_text("".join(r + "\n" for r in rows))
        mtime = 1_700_000_000_000_000_000 + i * 1_000_000_000
        os.utime(landing / f"f{i}.txt", ns=(mtime, mtime))
        records += rows
    return records


def write_config(root: Path, name: str, *, out: str = "out", ttl: str = "30s") -> Path:
    path = root / f"{name}.toml"
    path.write_text(textwrap.dedent(SETTINGS.format(out=out, ttl=ttl)))
    return path


def output(root: Path, out: str = "out") -> list[str]:
    folder = root / out
    if not folder.exists():
        return []
    files = sorted(
        (p for p in folder.iterdir() if not p.name.startswith((".", "_"))),
        key=lambda p: int(p.stem.rsplit("-", 1)[1]),
    )
    return [line for p in files for line in p.read_text().splitlines()]


def test_a_second_process_is_refused_naming_the_holder_and_a_killed_holder_is_replaced(
    tmp_path: Path,
) -> None:
    records = setup(tmp_path)
    config = write_config(tmp_path, "p")
    first = start_cli("run", str(config), "--no-progress")  # runs until stopped
    try:
        wait_for(lambda: len(cut_files(tmp_path / "shared")) > 0, what="the first cut")
        second = run_cli("run", str(config), "--available-now", "--no-progress")
        assert second.returncode == 1
        assert "is locked by" in second.stderr and f"pid {first.pid}" in second.stderr
        assert f"host {socket.gethostname()}" in second.stderr
        assert "stop that process" in second.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # The holder is provably gone (this host, its pid is free): taken over at once.
    third = run_cli("run", str(config), "--available-now", "--no-progress")
    assert third.returncode == 0, third.stderr
    assert "is gone" in third.stderr and "Took over the lock" in third.stderr
    assert output(tmp_path) == records  # every record once, across the kill


def test_a_holder_on_another_host_that_stopped_heartbeating_expires(tmp_path: Path) -> None:
    records = setup(tmp_path, files=1)
    config = write_config(tmp_path, "p", ttl="1s")
    assert run_cli("run", str(config), "--available-now", "--no-progress").returncode == 0
    # A process elsewhere took the lock, then its machine died: only its heartbeat can tell.
    shared = tmp_path / "shared"
    newest = max(int(p.name[6:18]) for p in shared.glob(".lock-*.json"))
    lock_file = shared / f".lock-{newest + 1:012d}.json"

    def plant(heartbeat: float) -> None:
        holder = LockHolder(
            owner="etl@elsewhere",
            host="elsewhere.example",
            pid=4242,
            pid_namespace=None,
            started=heartbeat,
            heartbeat=heartbeat,
            ttl=30.0,
            token="f" * 32,
            released=False,
            generation=newest + 1,
            path="",
        )
        lock_file.write_bytes(holder.to_json())

    plant(time.time())  # alive as far as anyone here can tell: refused
    refused = run_cli("run", str(config), "--available-now", "--no-progress")
    assert refused.returncode == 1
    assert "elsewhere.example" in refused.stderr and "expires in" in refused.stderr
    (tmp_path / "landing" / "late.txt").write_text("late\n")
    plant(time.time() - 60)  # its last heartbeat is older than its ttl: the holder is dead
    done = run_cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "Took over the lock" in done.stderr
    assert output(tmp_path) == [*records, "late"]


def test_another_pipeline_on_the_same_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    records = setup(tmp_path, files=2)
    owner = write_config(tmp_path, "owner")
    other = write_config(tmp_path, "other", out="elsewhere")  # another template: another job
    assert run_cli("run", str(owner), "--available-now", "--no-progress").returncode == 0
    shared = tmp_path / "shared"
    identity = json.loads((shared / "pipeline.json").read_text())

    refused = run_cli("run", str(other), "--available-now", "--no-progress")
    assert refused.returncode == 1
    assert "two jobs must not share checkpoint directory" in refused.stderr
    assert identity["pipeline_id"] in refused.stderr
    assert not (tmp_path / "elsewhere").exists()

    # Without the identity file, the identity stored in every cut still refuses it, and the
    # refused job does not stamp the directory as its own.
    (shared / "pipeline.json").unlink()
    cuts = sorted(p.name for p in cut_files(shared))
    refused = run_cli("run", str(other), "--available-now", "--no-progress")
    assert refused.returncode == 1
    assert "was written by pipeline" in refused.stderr and "two jobs" in refused.stderr
    assert not (shared / "pipeline.json").exists()
    assert sorted(p.name for p in cut_files(shared)) == cuts
    assert not (tmp_path / "elsewhere").exists()

    # The owner resumes where it was.
    (tmp_path / "landing" / "more.txt").write_text("more\n")
    again = run_cli("run", str(owner), "--available-now", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert output(tmp_path) == [*records, "more"]
    assert json.loads((shared / "pipeline.json").read_text()) == identity
