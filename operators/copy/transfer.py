"""One file from one filesystem to another (or the same one), whole or not at all, safe to
repeat after a crash at any point.

:func:`copy_file` in numbered steps:

1. Read the source's status: it must be a file. With ``delete_source`` a missing source is a
   finished copy only when this copy's marker beside the destination proves it (a crash after
   step 7b); otherwise :class:`SourceGoneError`, nothing copied.
2. Place the destination: a path ending in ``/`` or naming an existing directory receives the
   source's name inside it. When it exists and is the source under another name (a link, another
   URI of the same NameNode: :mod:`.identity`), :class:`SameFileError`, nothing touched.
3. Delete temporaries that earlier, killed attempts at this destination left beside it
   (``.<name>.<32 hex digits>._COPYING_``, nothing else; on the local disk not one a live
   writer still holds).
4. When the destination exists: the same content as the source (same size and SHA-256) is
   the copy already done, and nothing is written; other content is ``FileExistsError``
   naming it, unless ``overwrite``. With ``delete_source``, a destination not proven to be
   another file than the source is written again (steps 5 and 6) so that step 7 can prove it.
5. Write the source into a new hidden temporary beside the destination (unique name), chunk
   by chunk; check the source did not change meanwhile; sync; close.
6. Rename the temporary onto the destination (atomic; replacing it only with ``overwrite``).
7. Only now, the destination durable, and when asked: a. check the source is untouched and the
   destination is another file (the source's identity, size and mtime as before the copy, the
   destination's not); write the marker (``.<name>.<32 hex>._COPIED_``, naming the source and
   the destination's identity), synced; b. delete the source; c. delete the marker.

A failure in step 5 or 6 deletes the temporary; a kill leaves it to step 3 of the next attempt.
A reader of the destination's directory that skips hidden names never sees a partial file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import posixpath
import re
import uuid
from dataclasses import dataclass
from urllib.parse import quote

from operators.common.faults import FAULT_ENV, stop_here
from operators.copy.identity import Mark, mark, same_file
from operators.fs.local import LocalFileSystem, unlogged_listing
from region.fs import FileSystem

__all__ = [
    "COPYING_SUFFIX",
    "FAULT_ENV",
    "MARKER_SUFFIX",
    "Copied",
    "SameFileError",
    "SourceGoneError",
    "copy_file",
    "is_temporary_of",
    "location",
    "marker_name",
    "remove_leftovers",
    "same_content",
    "temporary_name",
]

logger = logging.getLogger(__name__)

#: The end of every temporary name (Hadoop's ``hdfs dfs -put`` marks its own the same way, and
#: directory scans skip both hidden names and this suffix).
COPYING_SUFFIX = "._COPYING_"
#: The end of a marker's name: a copy with ``delete_source`` between its rename and the end of
#: its source's deletion (step 7).
MARKER_SUFFIX = "._COPIED_"
#: Bytes per read and write request.
DEFAULT_CHUNK = 4 << 20
#: Longest file name kept whole inside a temporary name (255 bytes is the usual limit; the
#: temporary adds 45).
_NAME_BYTES = 200

#: Crash tests stop a copy at a point (:mod:`operators.common.faults`): ``copy_write`` (the first
#: chunk
#: is in the temporary), ``copy_before_rename`` (the temporary is complete and synced),
#: ``copy_after_rename`` (the destination is in place, the source not yet deleted),
#: ``copy_after_source_deleted`` (the source deleted, its marker not yet).


def _fault(point: str) -> None:
    stop_here(point, who="copy")


class SameFileError(ValueError):
    """The source and the destination are one file under two names: nothing was deleted."""


class SourceGoneError(FileNotFoundError):
    """``delete_source`` and no source, but a file at the destination that no marker of this
    copy proves it wrote: nothing was copied."""


def location(fs: FileSystem, path: str) -> str:
    """``path`` on ``fs`` as a URI that, given back, names the same file: its path
    percent-encoded (``a%20b.txt`` is ``…/a%2520b.txt``, ``a b.txt`` is ``…/a%20b.txt``; a
    name's bytes that are not UTF-8 as themselves, ``caf%E9``)."""
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)
    return fs.display(quote(path, safe="/", errors="surrogateescape"))


@dataclass(frozen=True, slots=True)
class Copied:
    """What :func:`copy_file` did. ``source`` and ``destination`` are URIs that name the files
    when given back (:func:`location`)."""

    source: str
    destination: str
    #: Bytes at the destination.
    size: int
    #: ``False`` when the destination already held the content (a repeat): nothing was written.
    written: bool
    source_deleted: bool


def _bytes(name: str) -> bytes:
    """A name's bytes: a local name that is not UTF-8 (Latin-1, from another system) is read
    as surrogates, which give back its own bytes."""
    return name.encode("utf-8", "surrogateescape")


def marker_name(source: str, name: str) -> str:
    """The marker's name for a copy of the file at URI ``source`` to a destination ``name``."""
    digest = hashlib.sha256(_bytes(source)).hexdigest()[:32]
    return f".{_name_stem(name)}.{digest}{MARKER_SUFFIX}"


def _name_stem(name: str) -> str:
    """``name``, or a shortened unique stand-in when a temporary of it would be too long."""
    if len(_bytes(name)) <= _NAME_BYTES:
        return name
    digest = hashlib.sha256(_bytes(name)).hexdigest()[:16]
    head = _bytes(name)[: _NAME_BYTES - 17].decode(errors="ignore")
    return f"{head}~{digest}"


def temporary_name(name: str) -> str:
    """A new temporary's name for a destination named ``name``: hidden, unique."""
    return f".{_name_stem(name)}.{uuid.uuid4().hex}{COPYING_SUFFIX}"


def is_temporary_of(candidate: str, name: str) -> bool:
    """Whether ``candidate`` is a temporary :func:`temporary_name` made for ``name``."""
    pattern = rf"\.{re.escape(_name_stem(name))}\.[0-9a-f]{{32}}{re.escape(COPYING_SUFFIX)}"
    return re.fullmatch(pattern, candidate) is not None


def _held_by_live_writer(fs: FileSystem, path: str) -> bool:
    """On the local disk a writer holds its file's ``flock`` until it closes or dies: a held
    one belongs to a copy still running. Other filesystems cannot tell (the lease of a killed
    HDFS writer lasts a minute): their leftovers are deleted, and a live copy that loses its
    temporary so fails at its rename, never publishing a partial file."""
    if not isinstance(fs, LocalFileSystem):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def remove_leftovers(fs: FileSystem, destination: str) -> int:
    """Step 3: delete what killed copies to ``destination`` left; the number deleted."""
    directory, name = posixpath.split(destination)
    try:
        # Only this copy's temporaries matter here: a named pipe or a link beside them is
        # someone else's, and no reason for a warning.
        with unlogged_listing():
            entries = fs.list_dir(directory or ".")
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for entry in entries:
        if entry.is_dir or not is_temporary_of(entry.name, name):
            continue
        if _held_by_live_writer(fs, entry.path):
            logger.warning(
                "%s: left in place, another copy to %s is writing it",
                fs.display(entry.path),
                fs.display(destination),
            )
            continue
        if fs.delete(entry.path):
            removed += 1
            logger.info("%s: deleted, left by an interrupted copy", fs.display(entry.path))
    return removed


def _digest(fs: FileSystem, path: str, size: int, chunk: int) -> str:
    sha = hashlib.sha256()
    offset = 0
    while offset < size:
        data = fs.read(path, offset, min(chunk, size - offset))
        if not data:
            break
        sha.update(data)
        offset += len(data)
    return sha.hexdigest()


def same_content(
    src_fs: FileSystem, src: str, dst_fs: FileSystem, dst: str, *, chunk: int = DEFAULT_CHUNK
) -> bool:
    """Whether two files hold the same bytes: sizes first, then SHA-256 of both contents.

    HDFS's own checksum (GETFILECHECKSUM) depends on block and chunk sizes and has no
    counterpart on a local disk, so both sides are read and hashed here.
    """
    src_size, dst_size = src_fs.status(src).size, dst_fs.status(dst).size
    if src_size != dst_size:
        return False
    return _digest(src_fs, src, src_size, chunk) == _digest(dst_fs, dst, dst_size, chunk)


def _place(src: str, dst_fs: FileSystem, dst: str) -> str:
    """Step 2: the destination path of ``src`` for a requested ``dst``."""
    name = posixpath.basename(src.rstrip("/"))
    if dst.endswith("/"):
        return posixpath.join(dst, name)
    try:
        if dst_fs.status(dst).is_dir:
            return posixpath.join(dst, name)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return dst


def _delete_quietly(fs: FileSystem, path: str) -> None:
    try:
        fs.delete(path)
    except Exception as exc:  # the caller's error is the one to report
        logger.warning("Could not delete the temporary file %s: %s", fs.display(path), exc)


def _write_temporary(
    src_fs: FileSystem,
    src: str,
    dst_fs: FileSystem,
    temp: str,
    *,
    chunk: int,
    permission: int | None,
) -> int:
    """Step 5: the source's bytes into ``temp``, synced and closed; their number."""
    before = src_fs.status(src)
    writer = dst_fs.create(temp, overwrite=False, permission=permission)
    try:
        copied = 0
        while True:
            data = src_fs.read(src, copied, chunk)
            if not data:
                break
            writer.write(data)
            if not copied and os.environ.get(FAULT_ENV) == "copy_write":
                writer.flush()  # the partial temporary is on disk for the test to see
                _fault("copy_write")
            copied += len(data)
            if len(data) < chunk:
                break
        after = src_fs.status(src)
        if after.size != copied or after.mtime_ns != before.mtime_ns:
            msg = (
                f"the source changed while it was copied ({before.size} bytes before, "
                f"{after.size} after, {copied} copied): copy it again once it is complete"
            )
            raise OSError(errno.EAGAIN, msg, src_fs.display(src))
        writer.sync()
    finally:
        writer.close()
    return copied


def copy_file(
    src_fs: FileSystem,
    src: str,
    dst_fs: FileSystem,
    dst: str,
    *,
    overwrite: bool = False,
    delete_source: bool = False,
    chunk: int = DEFAULT_CHUNK,
    permission: int | None = None,
) -> Copied:
    """Copy ``src`` on ``src_fs`` to ``dst`` on ``dst_fs`` (the steps in the module's text).

    Errors are the filesystems' built-in ones, naming the path: ``FileNotFoundError`` (no
    source; :class:`SourceGoneError` with ``delete_source`` and an unproven file at the
    destination), ``IsADirectoryError`` (the source is a directory), ``FileExistsError`` (the
    destination holds other content and ``overwrite`` is off), :class:`SameFileError` (a
    ``ValueError``: source and destination are one file), ``OSError`` (the source changed while
    copied, I/O).
    """
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be at least 1 byte")
    # 1. The source.
    try:
        source = src_fs.status(src)
    except FileNotFoundError:
        if delete_source:
            done = _finished_earlier(src_fs, src, dst_fs, dst)
            if done is not None:
                return done
        raise
    if source.is_dir:
        msg = "is a directory: only single files are copied"
        raise IsADirectoryError(errno.EISDIR, msg, src_fs.display(src))
    # 2. The destination, never the source under another name.
    dst = _place(src, dst_fs, dst)
    shown_src, shown_dst = src_fs.display(src), dst_fs.display(dst)
    src_mark = mark(src_fs, src)
    try:
        dst_mark: Mark | None = mark(dst_fs, dst)
    except FileNotFoundError:
        dst_mark = None
    one_file = None if dst_mark is None else same_file(src_fs, src, src_mark, dst_fs, dst, dst_mark)
    if one_file:
        raise SameFileError(
            f"{shown_src} and {shown_dst} are the same file (one identity under two names): "
            "nothing copied, nothing deleted"
        )
    # 3. What killed attempts left.
    remove_leftovers(dst_fs, dst)
    # 4. An existing destination.
    written = True
    replace = overwrite
    try:
        existing = dst_fs.status(dst)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if existing.is_dir:
            raise IsADirectoryError(errno.EISDIR, "the destination is a directory", shown_dst)
        if same_content(src_fs, src, dst_fs, dst, chunk=chunk):
            if delete_source and one_file is None:
                # Not proven another file: written again, so that step 7 can prove it.
                logger.info(
                    "%s already holds the content of %s, but is not known to be another file: "
                    "written again before the source is deleted",
                    shown_dst,
                    shown_src,
                )
                replace = True
            else:
                logger.info(
                    "%s already holds the content of %s: nothing to copy", shown_dst, shown_src
                )
                written = False
        elif not overwrite:
            msg = (
                "the destination exists with other content (replace it with --overwrite or "
                "overwrite_destination_file)"
            )
            raise FileExistsError(errno.EEXIST, msg, shown_dst)
    size = source.size
    if written:
        # 5. The temporary, then 6. the rename.
        temp = posixpath.join(posixpath.dirname(dst), temporary_name(posixpath.basename(dst)))
        try:
            size = _write_temporary(src_fs, src, dst_fs, temp, chunk=chunk, permission=permission)
            _fault("copy_before_rename")
            dst_fs.rename(temp, dst, overwrite=replace)
        except BaseException:
            _delete_quietly(dst_fs, temp)
            raise
        _fault("copy_after_rename")
    src_uri, dst_uri = location(src_fs, src), location(dst_fs, dst)
    # 7. The source, once the destination is durable and proven another file.
    deleted = False
    if delete_source:
        written_mark = mark(dst_fs, dst)
        if written:
            _check_untouched(src_fs, src, src_mark, written_mark, shown_src, shown_dst)
        marker = posixpath.join(
            posixpath.dirname(dst), marker_name(src_uri, posixpath.basename(dst))
        )
        _write_marker(dst_fs, marker, src_uri, dst_uri, written_mark)
        deleted = src_fs.delete(src)
        _fault("copy_after_source_deleted")
        dst_fs.delete(marker)
    return Copied(src_uri, dst_uri, size, written, deleted)


def _check_untouched(
    src_fs: FileSystem, src: str, before: Mark, written: Mark, shown_src: str, shown_dst: str
) -> None:
    """Step 7a: the source as it was before the copy (through its own handle), and the
    destination just written not that: then they are two files. One file under two names
    would show the rename's new file under both. Marks read through two handles are compared
    with :meth:`Mark.matches` (one may have no fileId)."""
    now = mark(src_fs, src)
    if now == before and not written.matches(before):
        return
    if now.matches(written):
        raise SameFileError(
            f"{shown_src} and {shown_dst} are the same file (its identity changed with the copy's "
            "rename): its content is unchanged, and it was not deleted"
        )
    msg = "the source changed after it was copied: it was not deleted, copy it again"
    raise OSError(errno.EAGAIN, msg, shown_src)


def _write_marker(fs: FileSystem, path: str, source: str, destination: str, at: Mark) -> None:
    record = {
        "source": source,
        "destination": destination,
        "key": list(at.key) if at.key is not None else None,
        "size": at.size,
        "mtime_ns": at.mtime_ns,
    }
    # One an earlier attempt left may still be held by its dead writer (an HDFS lease): a
    # delete ignores leases, a create over it would wait for the lease to expire.
    fs.delete(path)
    writer = fs.create(path, overwrite=False)
    try:
        try:
            writer.write(json.dumps(record, sort_keys=True).encode())
            writer.sync()
        finally:
            writer.close()
    except BaseException:
        _delete_quietly(fs, path)
        raise


def _marked(fs: FileSystem, path: str, source: str, at: Mark) -> bool:
    """Whether the marker at ``path`` names ``source`` and the destination as it is (``at``)."""
    try:
        record = json.loads(fs.read(path))
    except FileNotFoundError:
        return False
    except ValueError:  # cut short by a crash while it was written: the source is still there
        return False
    key = record.get("key")
    recorded = Mark(
        tuple(key) if key is not None else None,
        record.get("size"),
        record.get("mtime_ns"),
    )
    return bool(record.get("source") == source and recorded == at)


def _finished_earlier(src_fs: FileSystem, src: str, dst_fs: FileSystem, dst: str) -> Copied | None:
    """Step 1's repeat: the destination of a source already deleted, when this copy's marker
    proves it wrote it. ``None`` when there is no destination; :class:`SourceGoneError` when
    one is there without the proof."""
    placed = dst + posixpath.basename(src) if dst.endswith("/") else dst
    try:
        st = dst_fs.status(placed)
    except FileNotFoundError:
        return None
    if st.is_dir:
        placed = posixpath.join(placed, posixpath.basename(src))
        try:
            st = dst_fs.status(placed)
        except FileNotFoundError:
            return None
        if st.is_dir:
            return None
    shown_src, shown_dst = src_fs.display(src), dst_fs.display(placed)
    src_uri, dst_uri = location(src_fs, src), location(dst_fs, placed)
    marker = posixpath.join(
        posixpath.dirname(placed), marker_name(src_uri, posixpath.basename(placed))
    )
    if not _marked(dst_fs, marker, src_uri, mark(dst_fs, placed)):
        msg = (
            f"does not exist: nothing copied ({shown_dst} exists, but nothing shows this copy "
            "wrote it)"
        )
        raise SourceGoneError(errno.ENOENT, msg, shown_src)
    logger.warning(
        "%s is gone and %s exists: copied by an earlier attempt that deleted its source (its "
        "marker says so)",
        shown_src,
        shown_dst,
    )
    dst_fs.delete(marker)
    return Copied(src_uri, dst_uri, st.size, False, False)
