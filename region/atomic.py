"""A file that appears whole or not at all: the one write-to-temporary, sync, rename; and a file
cut back to a size on every filesystem (:func:`cut_to`).

Checkpoint cuts, lock generations, the Spark sink's log entries and the Spark scan's plans are
all published this way. A reader lists or opens only final names, so it never sees a file being
written; the temporary name is hidden (leading ``.``) and unique, so writers never collide on it.
Where the close waits on the storage (HDFS), it may run after the rename, in the background
(``close_later``): such a file may be found open, and is read with :func:`read_whole`.
"""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from collections.abc import Callable

from region.fs import CloseAwaiter, FileSystem, FileWriter, LaterCloser, LeaseRecoverer

__all__ = [
    "cut_to",
    "dir_permission",
    "read_whole",
    "temp_path",
    "write_atomically",
    "write_hidden",
]

logger = logging.getLogger(__name__)


def dir_permission(file_permission: int | None) -> int | None:
    """Directory mode matching a file mode: each class that may read may also traverse."""
    if file_permission is None:
        return None
    read_bits = file_permission & 0o444
    return file_permission | (read_bits >> 2) | 0o700


def temp_path(path: str) -> str:
    """A unique hidden name beside ``path``: ``.<name>.<uuid>.tmp``."""
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")


def write_atomically(
    fs: FileSystem,
    path: str,
    data: bytes,
    *,
    temp: str | None = None,
    overwrite: bool = False,
    permission: int | None = None,
    before_rename: Callable[[], None] | None = None,
    close_later: bool = False,
) -> None:
    """Publish ``data`` as ``path``, durable when this returns.

    1. Create ``temp`` (default :func:`temp_path`; never overwriting) with ``permission``.
    2. Write and sync it; close it, unless ``close_later``.
    3. Call ``before_rename`` (a last check, e.g. that a lock is still held).
    4. Rename it onto ``path``; without ``overwrite`` an existing ``path`` raises
       ``FileExistsError`` (of racing writers exactly one wins).
    5. With ``close_later``: close it in the background where the writer can
       (:class:`~region.fs.LaterCloser`: an HDFS close waits until a DataNode reports the
       block, 500 ms on a small cluster), else now. Durability comes from the sync of step 2
       and the rename does not need the file closed. Readers of ``path`` then use
       :func:`read_whole`: a crash before the close lands leaves ``path`` whole but open, with
       a dead writer's lease.

    On any failure after step 1 the temporary file is closed and deleted (a failed delete is
    logged, never raised over the original error) and the error propagates; ``path`` is
    untouched.
    """
    temp = temp if temp is not None else temp_path(path)
    writer = fs.create(temp, overwrite=False, permission=permission)
    try:
        try:
            writer.write(data)
            writer.sync()
        finally:
            if not close_later:
                writer.close()
        if before_rename is not None:
            before_rename()
        fs.rename(temp, path, overwrite=overwrite)
    except BaseException:
        _abandon(fs, writer, temp, close_later=close_later)
        raise
    if not close_later:
        return
    if isinstance(writer, LaterCloser):
        writer.close_later()
    else:
        writer.close()


def write_hidden(fs: FileSystem, temp: str, data: bytes, *, permission: int | None = None) -> None:
    """Steps 1 and 2 of :func:`write_atomically` ahead of time: ``data`` complete and synced
    under the hidden name ``temp`` (never overwriting), its close handed to the background
    where the writer can. Renaming it into place later is then one call, with no close left
    to wait for (it landed meanwhile). On failure the temporary file is deleted and the error
    propagates."""
    writer = fs.create(temp, overwrite=False, permission=permission)
    try:
        writer.write(data)
        writer.sync()
    except BaseException:
        _abandon(fs, writer, temp, close_later=True)
        raise
    if isinstance(writer, LaterCloser):
        writer.close_later()
    else:
        writer.close()


#: How long :func:`read_whole` waits for this process's own background closes before it ends a
#: file's lease: a close lands within a second or two on a healthy cluster.
_OWN_CLOSES_WAIT = 10.0
#: How long :func:`read_whole` asks again when a file's read fails after its lease recovery.
_SETTLE_WAIT = 20.0


def read_whole(fs: FileSystem, path: str) -> bytes:
    """Every byte of a file published by :func:`write_atomically`, also when its writer's close
    has not landed (``close_later``), or never will (the writer was killed).

    An HDFS client reads an open file's last block only by asking its DataNodes: hdfs-native
    does not (the backend reads that block through the cluster's WebHDFS when its address is
    known), and after a DataNode restart no client can until the lease is recovered. A
    published file is final (every byte synced before its rename, none written after), so
    ending its writer's lease loses nothing:

    1. Read the length the NameNode holds (an hsync records it), then the file.
    2. Short of that length, or failing for another reason than a missing or forbidden file:
       when this process has closes in the background (:class:`~region.fs.CloseAwaiter`; it
       may have written the file itself, e.g. the sink's owner.json at its start), wait for
       them and read again: recovering the lease of one's own file makes its close fail.
    3. Still short, on a filesystem with leases (:class:`~region.fs.LeaseRecoverer`): recover
       the lease (the file is closed at its synced length) and read it again.
    4. That read failing (its DataNode still settling the recovered block, or another reader
       recovering the same file meanwhile, as a driver and its tasks do after a crash): ask
       again, for up to ``_SETTLE_WAIT`` seconds, then let the error through.
    """

    def attempt() -> bytes | None:
        """Every byte (1.), or ``None`` when short of it or failing where a lease can end."""
        size = fs.status(path).size
        try:
            data = fs.read(path)
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except OSError as exc:
            if not isinstance(fs, LeaseRecoverer):
                raise
            logger.info("%s: read failed (%s)", fs.display(path), exc)
            return None
        if len(data) >= size or not isinstance(fs, LeaseRecoverer):
            return data
        logger.info(
            "%s: %d of %d bytes readable (left open by its writer)",
            fs.display(path),
            len(data),
            size,
        )
        return None

    data = attempt()
    if data is None and isinstance(fs, CloseAwaiter) and fs.await_closes(_OWN_CLOSES_WAIT):
        data = attempt()  # 2.
    if data is not None:
        return data
    assert isinstance(fs, LeaseRecoverer)  # attempt() gives None only there
    logger.info("%s: recovering its lease", fs.display(path))
    fs.recover_lease(path)  # 3.
    deadline, pause = time.monotonic() + _SETTLE_WAIT, 0.1
    while True:
        try:
            return fs.read(path)
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except OSError as exc:  # 4.
            if time.monotonic() + pause > deadline:
                raise
            logger.info(
                "%s: read after its lease recovery failed (%s); again in %.1fs",
                fs.display(path),
                exc,
                pause,
            )
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
            fs.recover_lease(path)


def _abandon(fs: FileSystem, writer: FileWriter, temp: str, *, close_later: bool) -> None:
    """After a failure: the temporary file deleted, its writer closed, neither raising over
    the caller's error. With ``close_later`` the close goes to the background first thing: a
    writer whose sync failed (a DataNode lost mid-pipeline) can take its full timeout and
    retries to close, and a lock's heartbeat or a cut must fail now, not after them. Deleting
    an open file is allowed; its background close then finds it gone."""
    if close_later and isinstance(writer, LaterCloser):
        _delete_quietly(fs, temp)
        writer.close_later()
        return
    try:
        writer.close()  # a no-op when closed already
    except Exception as exc:
        logger.warning("Could not close the temporary file %s: %s", fs.display(temp), exc)
    finally:
        _delete_quietly(fs, temp)


def _delete_quietly(fs: FileSystem, path: str) -> None:
    try:
        fs.delete(path)
    except Exception as exc:  # the caller's error is the one to report
        logger.warning("Could not delete the temporary file %s: %s", fs.display(path), exc)


_COPY_CHUNK = 8 << 20


def cut_to(
    fs: FileSystem, path: str, size: int, *, temp: str, permission: int | None = None
) -> None:
    """Make ``path`` hold its first ``size`` bytes (it must hold at least that many): truncate,
    or where the filesystem cannot, copy the prefix to ``temp`` (synced) and rename it over
    ``path``. The rename is atomic, so a crash leaves the file whole or cut, never half copied;
    only for files no reader uses (in-progress files)."""
    if fs.supports_truncate:
        fs.truncate(path, size)
        return
    writer = fs.create(temp, overwrite=True, permission=permission)
    try:
        offset = 0
        while offset < size:
            chunk = fs.read(path, offset, min(_COPY_CHUNK, size - offset))
            if not chunk:
                msg = f"{fs.display(path)}: ended at {offset} bytes, expected {size}"
                raise OSError(msg)
            writer.write(chunk)
            offset += len(chunk)
        writer.sync()
    finally:
        writer.close()
    fs.rename(temp, path, overwrite=True)
