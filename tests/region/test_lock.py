from __future__ import annotations

import builtins
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from operators.fs import open_path
from operators.fs.local import LocalFileSystem
from operators.testing import ManualClock, webhdfs_operations
from operators.testing.webhdfs_server import WebHdfsServer
from region.checkpoint import CheckpointStore
from region.errors import LockedError, LockLostError, LockUnsafeError
from region.fs import FileSystem
from region.lock import CheckpointLock, LockHolder
from tests.conftest import FsHandle, webhdfs_settings

T0 = 1_700_000_000.0


def _dir(backend: FsHandle) -> str:
    return f"{backend.root.rstrip('/')}/ckpt-{uuid.uuid4().hex[:8]}"


def _lock(
    backend: FsHandle, directory: str, owner: str, clock: ManualClock, **kw: Any
) -> CheckpointLock:
    kw.setdefault("heartbeat_interval", 0)
    return CheckpointLock(backend.fs, directory, owner=owner, ttl=30.0, clock=clock, **kw)


def _plant_holder(fs: FileSystem, directory: str, generation: int, heartbeat: float) -> None:
    """A holder on another machine that stopped heartbeating at ``heartbeat``."""
    record = LockHolder(
        owner="job-elsewhere",
        host="other-host",
        pid=4242,
        pid_namespace="pid:[1]",
        started=heartbeat - 100,
        heartbeat=heartbeat,
        ttl=30.0,
        token=uuid.uuid4().hex,
        released=False,
        generation=generation,
        path="",
    )
    writer = fs.create(f"{directory}/.lock-{generation:012d}.json", overwrite=True)
    writer.write(record.to_json())
    writer.close()


def test_second_acquire_fails_naming_the_holder(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    first = _lock(any_fs, directory, "job-a", clock)
    first.acquire()
    clock.now += 5
    second = _lock(any_fs, directory, "job-b", clock)
    with pytest.raises(LockedError) as err:
        second.acquire()
    message = str(err.value)
    assert "job-a" in message and f"pid {os.getpid()}" in message
    assert f"host {first.host}" in message and "started 2023-11-14T22:13:20Z" in message
    assert any_fs.fs.display(directory) in message
    assert "last heartbeat 5.0s ago" in message
    assert not second.held and first.held
    first.release()


def test_release_lets_the_next_one_in(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    with _lock(any_fs, directory, "job-a", clock) as first:
        assert first.held
    assert not first.held
    holder = first.holder()
    assert holder is not None and holder.released
    with _lock(any_fs, directory, "job-b", clock):
        holder = first.holder()
        assert holder is not None and holder.owner == "job-b" and not holder.released
    # Released generations stay behind as one marker file; leases are gone.
    names = [s.name for s in any_fs.fs.list_dir(directory)]
    assert len(names) == 1 and names[0].startswith(".lock-") and names[0].endswith(".json")


def test_in_use_says_whether_a_start_now_would_be_refused(any_fs: FsHandle) -> None:
    # What `hdfs-region switch` asks to tell "the running job applies it" from "pending".
    directory, clock = _dir(any_fs), ManualClock(T0)
    probe = _lock(any_fs, directory, "probe", clock)
    assert probe.in_use() is None  # nothing ever ran here
    with _lock(any_fs, directory, "job-a", clock):
        clock.now += 5
        shown = probe.in_use()
        assert shown is not None and "job-a" in shown and f"pid {os.getpid()}" in shown
    assert probe.in_use() is None  # released
    _plant_holder(any_fs.fs, directory, 7, heartbeat=clock.now - 29)
    assert probe.in_use() is not None and "job-elsewhere" in str(probe.in_use())
    clock.now += 2  # its heartbeat is older than its ttl: a start would take it over
    assert probe.in_use() is None


def test_an_expired_lock_is_taken_over_and_a_fresh_one_is_not(
    any_fs: FsHandle, caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    any_fs.fs.mkdirs(directory)
    _plant_holder(any_fs.fs, directory, 1, heartbeat=T0 - 29)
    with pytest.raises(LockedError, match=r"job-elsewhere \(host other-host, pid 4242.*in 1s"):
        _lock(any_fs, directory, "job-b", clock).acquire()

    clock.now += 2  # now the heartbeat is 31 s old, beyond the holder's ttl of 30 s
    taker = _lock(any_fs, directory, "job-b", clock)
    with caplog.at_level(logging.WARNING, logger="region.lock"):
        taker.acquire()
    assert taker.held
    assert any("job-elsewhere" in r.getMessage() for r in caplog.records)
    holder = taker.holder()
    assert holder is not None and holder.owner == "job-b" and holder.generation == 2
    taker.release()


def test_two_racing_takers_of_an_expired_lock_exactly_one_wins(any_fs: FsHandle) -> None:
    for _round in range(5):
        directory, clock = _dir(any_fs), ManualClock(T0)
        any_fs.fs.mkdirs(directory)
        _plant_holder(any_fs.fs, directory, 7, heartbeat=T0 - 60)
        racers = [_lock(any_fs, directory, f"racer-{i}", clock) for i in range(2)]
        barrier = threading.Barrier(len(racers))
        outcome: dict[str, BaseException | None] = {}

        def race(
            lock: CheckpointLock,
            barrier: threading.Barrier,
            outcome: dict[str, BaseException | None],
        ) -> None:
            barrier.wait()
            try:
                lock.acquire()
                outcome[lock.owner] = None
            except BaseException as exc:
                outcome[lock.owner] = exc

        threads = [threading.Thread(target=race, args=(r, barrier, outcome)) for r in racers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in racers if outcome[r.owner] is None]
        assert len(winners) == 1, outcome
        (loser,) = [r for r in racers if r is not winners[0]]
        assert isinstance(outcome[loser.owner], LockedError)
        assert winners[0].owner in str(outcome[loser.owner])
        assert winners[0].held and not loser.held
        winners[0].release()


def test_a_stalled_holder_that_loses_its_lock_is_told(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    holder = _lock(any_fs, directory, "job-a", clock)
    holder.acquire()
    clock.now += 10
    holder.refresh()
    current = holder.holder()
    assert current is not None and current.heartbeat == T0 + 10 and current.owner == "job-a"

    # While job-a stalled, a process elsewhere judged it expired and took the next generation.
    _plant_holder(any_fs.fs, directory, current.generation + 1, heartbeat=clock.now)
    with pytest.raises(LockLostError, match="job-elsewhere"):
        holder.refresh()
    with pytest.raises(LockLostError, match="job-elsewhere"):
        holder.check()
    assert not holder.held
    holder.release()  # must not remove the new holder's lock
    current = holder.holder()
    assert current is not None and current.owner == "job-elsewhere"


class _FlakyListing:
    """The real filesystem, except that listings fail while ``broken`` is set."""

    def __init__(self, fs: FileSystem) -> None:
        self._fs, self.broken = fs, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def list_dir(self, path: str) -> Any:
        if self.broken:
            raise ConnectionError(f"{path}: connection reset")
        return self._fs.list_dir(path)


def test_a_heartbeat_that_failed_half_way_does_not_lose_the_lock(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    flaky = _FlakyListing(any_fs.fs)
    lock = CheckpointLock(flaky, directory, owner="job-a", clock=clock, heartbeat_interval=0)  # type: ignore[arg-type]
    lock.acquire()
    flaky.broken = True  # the rename of the next generation succeeds, the check after it fails
    with pytest.raises(ConnectionError):
        lock.refresh()
    flaky.broken = False
    clock.now += 10
    lock.refresh()
    assert lock.held
    with pytest.raises(LockedError, match="job-a"):
        _lock(any_fs, directory, "job-b", clock).acquire()
    lock.release()


def test_the_heartbeat_thread_keeps_refreshing_until_release(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    lock = CheckpointLock(any_fs.fs, directory, owner="job-a", heartbeat_interval=0.005)
    lock.acquire()
    deadline = time.monotonic() + 10
    while (h := lock.holder()) is None or h.generation < 4:
        assert time.monotonic() < deadline, "no heartbeat written"
        time.sleep(0.005)
    lock.release()
    final = lock.holder()
    assert final is not None and final.released
    assert len(any_fs.fs.list_dir(directory)) == 1


def test_a_generation_a_heartbeat_deletes_while_it_is_read_is_looked_up_again(
    webhdfs_server: WebHdfsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """holder() listed generation 1 as the newest; while the WebHDFS datanode step was opening
    it, a heartbeat wrote generation 2 and deleted 1. The read finds no file and holder() looks
    again, naming generation 2 (the interleaving of a heartbeat every few milliseconds)."""
    fs, _ = open_path("/", webhdfs_settings(webhdfs_server.uri))
    directory = f"/tests/lock-{uuid.uuid4().hex[:8]}/ckpt"
    lock = CheckpointLock(fs, directory, owner="job-a", heartbeat_interval=0)
    lock.acquire()
    taken = lock.holder()
    assert taken is not None and taken.generation == 1
    local = os.fspath(webhdfs_server.local_path(taken.path))
    real_open = builtins.open
    beats: list[int] = []

    def open_after_a_heartbeat(file: str, mode: str = "r", *args: object, **kw: object) -> object:
        if mode == "rb" and os.fspath(file) == local and not beats:
            lock.refresh()  # the heartbeat thread's beat, served meanwhile
            beats.append(1)
        return real_open(file, mode, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(webhdfs_operations, "open", open_after_a_heartbeat, raising=False)
    newest = lock.holder()
    assert beats == [1]
    assert newest is not None and newest.owner == "job-a" and newest.generation == 2
    lock.release()
    final = lock.holder()
    assert final is not None and final.released and final.generation == 3


def test_lock_files_are_invisible_to_the_checkpoint_store(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    with _lock(any_fs, directory, "job-a", clock):
        store = CheckpointStore(any_fs.fs, directory, retain=1)
        assert store.latest() is None and store.next_cut_id() == 1
        for n in (1, 2, 3):
            store.write(n, {"op": {"n": n}})
        assert [i.cut_id for i in store.list()] == [3]
        lock = _lock(any_fs, directory, "job-b", clock)
        with pytest.raises(LockedError, match="job-a"):
            lock.acquire()


# --- local disk: the lease held by a live process ---------------------------------------------


def test_a_stalled_but_living_holder_is_not_taken_over_on_local_disk(tmp_path: Any) -> None:
    directory, clock = str(tmp_path / "ckpt"), ManualClock(T0)
    holder = CheckpointLock(LocalFileSystem(), directory, owner="job-a", clock=clock, ttl=30)
    holder.heartbeat_interval = 0
    holder.acquire()
    clock.now += 3600  # no heartbeat for an hour, but the process still holds its lease
    with pytest.raises(LockedError, match=r"job-a.*overdue but its process is alive"):
        CheckpointLock(LocalFileSystem(), directory, owner="job-b", clock=clock).acquire()
    holder.release()


def _holder_process(directory: str, owner: str) -> subprocess.Popen[str]:
    """Another process that takes the lock and sleeps holding it."""
    script = textwrap.dedent(
        f"""
        import time
        from operators.fs.local import LocalFileSystem
        from region.lock import CheckpointLock
        CheckpointLock(LocalFileSystem(), {directory!r}, owner={owner!r}).acquire()
        print("locked", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _proc_status(pid: int) -> str:
    return Path(f"/proc/{pid}/status").read_text()


def _taken_over_by_next_job(directory: str) -> None:
    with CheckpointLock(LocalFileSystem(), directory, owner="next-job") as lock:
        current = lock.holder()
        assert current is not None and current.owner == "next-job"


def test_a_crashed_holder_on_this_host_is_taken_over_at_once(tmp_path: Any) -> None:
    directory = str(tmp_path / "ckpt")
    proc = _holder_process(directory, "crashing-job")
    try:
        with pytest.raises(LockedError, match="crashing-job"):
            CheckpointLock(LocalFileSystem(), directory, owner="next-job").acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Same heartbeat age, but the holder's process is gone: no need to wait for the ttl.
    _taken_over_by_next_job(directory)


def test_a_holder_killed_with_its_release_written_ahead_leaves_a_file_the_next_one_removes(
    tmp_path: Any,
) -> None:
    """The release's record is written when the lock is taken (the stop only renames it). A
    holder killed -9 leaves it behind as a hidden temporary file beside its unreleased
    generation: it names no generation, so the next job takes over as from any crashed
    holder, and its heartbeat deletes the leftover once older than a ttl, as any temporary
    file a crash left. What remains after its own release is one released generation."""
    directory = str(tmp_path / "ckpt")
    proc = _holder_process(directory, "crashing-job")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fs = LocalFileSystem()
    (leftover,) = [s for s in fs.list_dir(directory) if s.name.endswith(".tmp")]
    written = LockHolder.from_json(fs.read(leftover.path), 0, leftover.path)
    assert written is not None and written.released and written.owner == "crashing-job"
    clock = ManualClock(time.time())
    lock = CheckpointLock(fs, directory, owner="next-job", clock=clock, heartbeat_interval=0)
    lock.acquire()  # at once: the holder's process is gone
    current = lock.holder()
    assert current is not None and current.owner == "next-job" and not current.released
    assert fs.exists(leftover.path)  # younger than a ttl: a live writer could still rename it
    clock.now += lock.ttl + 1
    lock.refresh()
    assert not fs.exists(leftover.path)
    lock.release()
    (only,) = fs.list_dir(directory)
    final = lock.holder()
    assert final is not None and final.released and final.owner == "next-job"
    assert only.path == final.path


def test_a_release_whose_record_written_ahead_was_removed_writes_it(any_fs: FsHandle) -> None:
    """The record written ahead may be gone at the stop (deleted by hand, or by a process that
    took the lock over meanwhile): the release writes the record then, as a heartbeat does."""
    directory, clock = _dir(any_fs), ManualClock(T0)
    lock = _lock(any_fs, directory, "job-a", clock)
    lock.acquire()
    (ahead,) = [s for s in any_fs.fs.list_dir(directory) if s.name.endswith(".tmp")]
    any_fs.fs.delete(ahead.path)
    lock.release()
    final = lock.holder()
    assert final is not None and final.released and final.owner == "job-a"
    assert [s.path for s in any_fs.fs.list_dir(directory)] == [final.path]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc to see a zombie")
def test_a_killed_holder_nobody_reaped_yet_is_taken_over_at_once(tmp_path: Any) -> None:
    # kill -9 of a runner whose parent is gone leaves a zombie where init does not reap (many
    # containers): kill(pid, 0) still finds it, but it holds nothing.
    directory = str(tmp_path / "ckpt")
    proc = _holder_process(directory, "zombie-job")
    try:
        proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not re.search(r"State:\s+Z.*Threads:\s+1\n", _proc_status(proc.pid), re.S):
            assert time.monotonic() < deadline, "the killed holder never became a zombie"
            time.sleep(0.01)
        os.kill(proc.pid, 0)  # not reaped: the pid still answers
        _taken_over_by_next_job(directory)
    finally:
        proc.kill()
        proc.wait()


def test_a_holder_that_lost_the_lock_publishes_no_more_cuts(any_fs: FsHandle) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    lock = _lock(any_fs, directory, "job-a", clock)
    lock.acquire()
    store = CheckpointStore(any_fs.fs, directory, guard=lock.check)
    store.write(1, {"op": {"n": 1}})
    current = lock.holder()
    assert current is not None
    _plant_holder(any_fs.fs, directory, current.generation + 1, heartbeat=clock.now)
    with pytest.raises(LockLostError):
        lock.refresh()
    with pytest.raises(LockLostError, match="job-elsewhere"):
        store.write(2, {"op": {"n": 2}})
    assert [i.cut_id for i in store.list()] == [1]
    assert not [s.name for s in any_fs.fs.list_dir(directory) if s.name.startswith(".cut-")]


class _LockWritesFail:
    """The real filesystem, except that writing a lock generation raises ``error`` while
    ``broken`` is set (as a WebHDFS backend maps IllegalArgumentException to ValueError)."""

    def __init__(self, fs: FileSystem, error: Exception) -> None:
        self._fs, self.error, self.broken = fs, error, False
        self.failed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def create(self, path: str, *args: Any, **kw: Any) -> Any:
        if self.broken and "/.lock-" in path:
            self.failed.set()
            raise self.error
        return self._fs.create(path, *args, **kw)


@pytest.mark.parametrize("error", [ValueError("CREATE: UnknownHostException"), RuntimeError("x")])
def test_a_heartbeat_failing_with_any_exception_pauses_the_holder_before_its_ttl(
    any_fs: FsHandle, error: Exception
) -> None:
    directory, clock = _dir(any_fs), ManualClock(T0)
    failing = _LockWritesFail(any_fs.fs, error)
    lost, unsafe = threading.Event(), threading.Event()
    lock = CheckpointLock(
        failing,  # type: ignore[arg-type]
        directory,
        owner="job-a",
        ttl=30.0,
        heartbeat_interval=0.01,
        clock=clock,
        lease=False,  # as on a remote filesystem: nothing but the heartbeat keeps the lock
        on_lost=lambda reason: lost.set(),
        on_unsafe=lambda reason: unsafe.set(),
    )
    lock.acquire()
    store = CheckpointStore(any_fs.fs, directory, guard=lock.check)
    # 1. The heartbeat keeps failing (and retrying); the lock is still safe for half its ttl.
    failing.broken = True
    assert failing.failed.wait(10), "no heartbeat ran"
    clock.now += 14
    lock.check()
    store.write(1, {"op": {"n": 1}})
    # 2. 16 s without a renewal: more than half the ttl. Nothing is written any more.
    clock.now += 2
    with pytest.raises(LockUnsafeError, match=type(error).__name__):
        lock.check()
    assert unsafe.wait(10), "the heartbeat thread did not report the unsafe lock"
    with pytest.raises(LockUnsafeError):
        store.write(2, {"op": {"n": 2}})
    assert [i.cut_id for i in store.list()] == [1]
    # All this happened before anyone else could take the lock over.
    with pytest.raises(LockedError, match="job-a"):
        _lock(any_fs, directory, "job-b", clock).acquire()
    # 3. The filesystem answers again: the next heartbeat renews the lock, writing resumes.
    failing.broken = False
    deadline = time.monotonic() + 10
    while True:
        try:
            lock.check()
            break
        except LockUnsafeError:
            assert time.monotonic() < deadline, "the heartbeat did not renew the lock"
            time.sleep(0.01)
    store.write(2, {"op": {"n": 2}})
    assert not lost.is_set()
    # 4. Broken again past the ttl: another process takes over, and the holder learns it at
    #    its next heartbeat that gets through: lost for good.
    failing.failed.clear()
    failing.broken = True
    assert failing.failed.wait(10)
    clock.now += 31
    with _lock(any_fs, directory, "job-b", clock) as taker:
        assert taker.held
        failing.broken = False
        assert lost.wait(10), "the holder did not learn that its lock was taken over"
        with pytest.raises(LockLostError):
            lock.check()
        with pytest.raises(LockLostError):
            store.write(3, {"op": {"n": 3}})
    assert [i.cut_id for i in store.list()] == [1, 2]
    lock.release()


def test_a_heartbeat_that_fails_once_is_retried_and_keeps_the_lock(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    failing = _LockWritesFail(any_fs.fs, ValueError("CREATE: UnknownHostException"))
    lock = CheckpointLock(
        failing,  # type: ignore[arg-type]
        directory,
        owner="job-a",
        ttl=30.0,
        heartbeat_interval=0.01,
        lease=False,
    )
    lock.acquire()
    first = lock.holder()
    failing.broken = True
    assert failing.failed.wait(10), "no heartbeat ran"
    failing.broken = False
    deadline = time.monotonic() + 10
    while (h := lock.holder()) is None or first is None or h.generation <= first.generation + 2:
        assert time.monotonic() < deadline, "the heartbeat did not come back"
        time.sleep(0.005)
    lock.check()
    assert lock.held
    lock.release()
