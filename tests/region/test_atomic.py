"""write_atomically: a file appears whole or not at all, and a failure leaves no temporary file."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from unittest import mock

import pytest

from operators.fs.local import LocalFileSystem
from region.atomic import dir_permission, read_whole, temp_path, write_atomically
from region.checkpoint import CheckpointStore
from region.fs import FileWriter
from region.lock import CheckpointLock
from tests.conftest import FsHandle
from tests.region.closes import LaterClosing


def names(handle: FsHandle, directory: str) -> list[str]:
    return sorted(s.name for s in handle.fs.list_dir(directory))


def test_the_file_appears_whole_and_no_temporary_file_stays(any_fs: FsHandle) -> None:
    directory = any_fs.path("d")
    any_fs.fs.mkdirs(directory)
    path = any_fs.path("d", "entry.json")
    write_atomically(any_fs.fs, path, b'{"a": 1}\n')
    assert any_fs.fs.read(path) == b'{"a": 1}\n'
    assert names(any_fs, directory) == ["entry.json"]


def test_without_overwrite_an_existing_file_wins_and_the_loser_leaves_nothing(
    any_fs: FsHandle,
) -> None:
    directory = any_fs.path("d")
    any_fs.fs.mkdirs(directory)
    path = any_fs.path("d", "gen-1.json")
    write_atomically(any_fs.fs, path, b"first\n")
    with pytest.raises(FileExistsError):
        write_atomically(any_fs.fs, path, b"second\n")
    assert any_fs.fs.read(path) == b"first\n"
    assert names(any_fs, directory) == ["gen-1.json"]
    write_atomically(any_fs.fs, path, b"second\n", overwrite=True)
    assert any_fs.fs.read(path) == b"second\n"


class _BrokenSync(LocalFileSystem):
    """Local files whose writers fail to sync (a disk that reports an I/O error)."""

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> FileWriter:
        writer = super().create(path, overwrite=overwrite, permission=permission)

        def sync() -> None:
            raise OSError(5, "Input/output error", path)

        writer.sync = sync  # type: ignore[method-assign]
        return writer


def test_a_failed_sync_publishes_nothing_and_removes_the_temporary_file(tmp_path: Path) -> None:
    fs = _BrokenSync()
    path = str(tmp_path / "entry.json")
    with pytest.raises(OSError, match="Input/output error"):
        write_atomically(fs, path, b"data\n")
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_before_the_rename_publishes_nothing(tmp_path: Path) -> None:
    def lock_lost() -> None:
        raise RuntimeError("the lock was taken over")

    path = str(tmp_path / "cut.json")
    with pytest.raises(RuntimeError, match="taken over"):
        write_atomically(LocalFileSystem(), path, b"data\n", before_rename=lock_lost)
    assert list(tmp_path.iterdir()) == []


class _NoDelete(LocalFileSystem):
    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        raise OSError(28, "No space left on device", dst)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        raise ConnectionError(f"{path}: connection reset")


def test_a_failed_clean_up_is_logged_and_never_hides_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "entry.json")
    with (
        caplog.at_level(logging.WARNING, logger="region.atomic"),
        pytest.raises(OSError, match="No space left"),
    ):
        write_atomically(_NoDelete(), path, b"data\n", temp=str(tmp_path / ".entry.tmp"))
    assert "Could not delete the temporary file" in caplog.text
    assert ".entry.tmp" in caplog.text
    assert not (tmp_path / "entry.json").exists()


def test_the_file_gets_the_permission_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    write_atomically(LocalFileSystem(), str(path), b"x", permission=0o640)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_temporary_names_are_hidden_unique_and_beside_the_file() -> None:
    a, b = temp_path("/d/entry.json"), temp_path("/d/entry.json")
    assert a != b
    assert a.startswith("/d/.entry.json.") and a.endswith(".tmp")


@pytest.mark.parametrize(
    ("file_mode", "dir_mode"), [(0o600, 0o700), (0o640, 0o750), (0o644, 0o755), (None, None)]
)
def test_a_directory_lets_whoever_may_read_the_files_traverse_it(
    file_mode: int | None, dir_mode: int | None
) -> None:
    assert dir_permission(file_mode) == dir_mode


def test_cuts_and_the_lock_wait_for_no_close_and_publish_synced_files(tmp_path: Path) -> None:
    """A checkpoint, and each change of the lock (take, heartbeat), is renamed into place once
    synced and closed afterwards in the background: the close is off the cut. The release's
    record is written ahead, at the take (closed in the background then), and the release
    only renames it into place: a stopping process starts no close."""
    fs = LaterClosing()
    directory = str(tmp_path / "ck")
    lock = CheckpointLock(fs, directory, heartbeat_interval=0)
    store = CheckpointStore(fs, directory, guard=lock.check)
    lock.acquire()
    lock.refresh()
    store.write(1, {"op": {"offset": 7}})
    before_release, created = len(fs.steps), len(fs.created)
    lock.release()
    published = [(step, path) for step, path in fs.steps if path.endswith(".tmp")]
    assert [step for step, _ in published] == [
        *("rename", "close_later"),  # the take
        "close_later",  # the release's record, written ahead
        *("rename", "close_later") * 2,  # the heartbeat, the checkpoint
        "rename",  # the release
    ]
    released = [step for step, path in fs.steps[before_release:] if not path.endswith(".lease")]
    assert released == ["rename"] and fs.created[created:] == []
    assert store.latest() is not None and store.latest().operators == {"op": {"offset": 7}}


def test_read_whole_recovers_the_lease_of_a_published_file_read_short(tmp_path: Path) -> None:
    """A published file left open (its writer killed before its background close landed):
    a client that reads only complete blocks gets it short; its bytes are all synced and none
    is written after the rename, so ending the lease loses nothing and the read is whole."""

    class _OpenUntilRecovered(LocalFileSystem):
        recovered: list[str] = []

        def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
            data = super().read(path, offset, length)
            return data if path in self.recovered else b""

        def recover_lease(self, path: str) -> float:
            self.recovered.append(path)
            return 0.0

    fs = _OpenUntilRecovered()
    path = str(tmp_path / "cut.json")
    write_atomically(fs, path, b"whole\n")
    assert read_whole(fs, path) == b"whole\n"
    assert fs.recovered == [path]
    assert read_whole(LocalFileSystem(), path) == b"whole\n"  # no lease to recover


def test_read_whole_asks_again_while_a_recovered_file_cannot_be_read_yet(tmp_path: Path) -> None:
    """Right after a lease recovery (another reader's, or the block still being settled on its
    DataNode) a read can fail: it is asked again, and a read still failing after the wait
    raises its own error, naming the file."""

    class _SettlingAfterRecovery(LocalFileSystem):
        def __init__(self, failures: int) -> None:
            self.failures = failures
            self.recoveries = 0

        def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
            if self.recoveries and self.failures:
                self.failures -= 1
                raise OSError(5, "OPEN: All DataNodes failed", path)
            return b"" if not self.recoveries else super().read(path, offset, length)

        def recover_lease(self, path: str) -> float:
            self.recoveries += 1
            return 0.0

    path = str(tmp_path / "00000000000000000002.json")
    write_atomically(LocalFileSystem(), path, b"entry\n")
    fs = _SettlingAfterRecovery(failures=2)
    assert read_whole(fs, path) == b"entry\n"
    assert fs.failures == 0 and fs.recoveries == 3
    never = _SettlingAfterRecovery(failures=10**6)
    with mock.patch("region.atomic._SETTLE_WAIT", 0.5), pytest.raises(OSError, match="DataNodes"):
        read_whole(never, path)


def test_a_failed_sync_hands_the_close_to_the_background_and_reports_the_sync(
    tmp_path: Path,
) -> None:
    """A lock heartbeat or a cut whose sync fails (a DataNode lost mid-pipeline) fails at once
    with that error: the close of the broken writer, which on HDFS can wait out its timeout
    and retries, runs in the background, and nothing is published."""

    class _BrokenSyncSlowClose(LaterClosing):
        def create(
            self, path: str, *, overwrite: bool = False, permission: int | None = None
        ) -> FileWriter:
            writer = super().create(path, overwrite=overwrite, permission=permission)

            def sync() -> None:
                raise OSError(5, "HSYNC failed: connection refused", path)

            def close_now() -> None:
                self.steps.append(("close", path))
                raise TimeoutError(f"{path}: CLOSE did not finish in 20 s")

            writer.sync = sync  # type: ignore[method-assign]
            writer.close = close_now  # type: ignore[method-assign]
            return writer

    fs = _BrokenSyncSlowClose()
    path = str(tmp_path / "lock.json")
    with pytest.raises(OSError, match="HSYNC failed"):
        write_atomically(fs, path, b"data\n", close_later=True)
    assert [step for step, _ in fs.steps] == ["close_later"]
    assert list(tmp_path.iterdir()) == []
