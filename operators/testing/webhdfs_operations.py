"""The WebHDFS stand-in's operations, each as Hadoop 3.4.1 answers it (its checks in Hadoop's
order), and the table that routes ``(method, op)`` to them.

- GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH (startAfter; ``list_page`` children an answer),
  GETHOMEDIRECTORY, OPEN (offset, length), CREATE (overwrite, permission), APPEND, TRUNCATE
  (newlength), RENAME (destination; ``renameoptions=NONE|OVERWRITE`` as Hadoop's rename2),
  DELETE (recursive), MKDIRS (permission), SETPERMISSION, SETTIMES (modificationtime,
  accesstime).
- As in Hadoop, the namenode step of CREATE checks nothing; those of APPEND and OPEN check that
  the path exists (and OPEN's offset against a non-empty file's length); the datanode step does
  the rest.
- An upload holds the file's lease: a CREATE with overwrite (or a DELETE) meanwhile removes the
  file, and the upload then fails. A client that goes away mid-upload leaves the bytes received
  so far in a closed file, as a datanode does; a datanode that dies mid-upload
  (``cut_next_upload_after``, or the server stopped or killed) leaves the bytes and a lease in
  recovery.
- OPEN's datanode step opens the file after its checks: a file deleted in between is not found
  (404 FileNotFoundException), as Hadoop's datanode, which opens it through the namenode, answers.
- Only the owner or the superuser may SETPERMISSION.

What a path's lease, owner and mode are, and the permission checks, are the namespace's
(:mod:`operators.testing.webhdfs_namespace`).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat as stat_mod
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

from operators.testing.webhdfs_errors import RemoteError, bad_param, long_param, not_found
from operators.testing.webhdfs_http import CutOff, Handler, drain, request_body, send, send_json
from operators.testing.webhdfs_namespace import Namespace, normalize

__all__ = ["OPERATIONS", "Operation", "Server"]


class Server(Protocol):
    """What an operation uses of the server
    (:class:`~operators.testing.webhdfs_standin.WebHdfsServer`): its namespace and lock, the
    settings and counters of the operations, the redirect to the datanode step."""

    host: str
    port: int
    list_page: int | None
    rename_options: bool
    cut_next_upload_after: int | None
    datanode_requests: Counter[str]
    truncate_answers: Counter[bool]
    namespace: Namespace
    _lock: threading.RLock

    @property
    def _generation(self) -> int: ...

    def _redirect(self, req: Handler, op: str, path: str, params: dict[str, str]) -> None: ...


#: An operation: ``(server, req, path, params, user, datanode, consumed)``. ``datanode``: the
#: request is the datanode step of a redirect; ``consumed[0]``: the request body was read.
Operation = Callable[[Server, Handler, str, dict[str, str], str, bool, list[bool]], None]


def op_getfilestatus(server: Server, req: Handler, path: str, params: dict[str, str],
                     user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    with server._lock:
        ns.traverse(user, path)
        st = ns.stat(path)
        if st is None:
            raise not_found(f"File does not exist: {path}")
        status = ns.file_status(path, st, "", user)
    drain(req, consumed)
    send_json(req, 200, {"FileStatus": status})


def op_liststatus(server: Server, req: Handler, path: str, params: dict[str, str],
                  user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    with server._lock:
        ns.traverse(user, path)
        st = ns.stat(path)
        if st is None:
            raise not_found(f"File {path} does not exist.")
        if not stat_mod.S_ISDIR(st.st_mode):
            statuses = [ns.file_status(path, st, "", user)]
        else:
            ns.check(user, path, "READ_EXECUTE")
            statuses = []
            for name in sorted(ns.children(path)):
                child = posixpath.join(path, name)
                cst = ns.stat(child)
                if cst is not None:
                    statuses.append(ns.file_status(child, cst, name, user))
    drain(req, consumed)
    send_json(req, 200, {"FileStatuses": {"FileStatus": statuses}})


def op_liststatus_batch(server: Server, req: Handler, path: str, params: dict[str, str],
                        user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    page = server.list_page
    if page is None:
        msg = 'Invalid value for webhdfs parameter "op": LISTSTATUS_BATCH is not a valid GET '
        raise RemoteError(400, "IllegalArgumentException", msg + "operation.")
    ns = server.namespace
    after = params.get("startAfter", "")
    with server._lock:
        ns.traverse(user, path)
        st = ns.stat(path)
        if st is None:
            raise not_found(f"File {path} does not exist.")
        if not stat_mod.S_ISDIR(st.st_mode):
            statuses = [ns.file_status(path, st, "", user)]
            remaining = 0
        else:
            ns.check(user, path, "READ_EXECUTE")
            # Hadoop orders children by their names' bytes and pages after startAfter.
            names = sorted(ns.children(path), key=os.fsencode)
            names = [n for n in names if os.fsencode(n) > os.fsencode(after)]
            statuses = []
            for name in names[:page]:
                child = posixpath.join(path, name)
                cst = ns.stat(child)
                if cst is not None:
                    statuses.append(ns.file_status(child, cst, name, user))
            remaining = max(0, len(names) - page)
    drain(req, consumed)
    body = {
        "partialListing": {"FileStatuses": {"FileStatus": statuses}},
        "remainingEntries": remaining,
    }
    send_json(req, 200, {"DirectoryListing": body})


def op_gethomedirectory(server: Server, req: Handler, path: str, params: dict[str, str],
                        user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    drain(req, consumed)
    send_json(req, 200, {"Path": f"/user/{user}"})


def op_open(server: Server, req: Handler, path: str, params: dict[str, str],
            user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    offset = long_param(params, "offset", 0) or 0
    length = long_param(params, "length", None)
    if not datanode:
        # The namenode: the path must exist, a non-empty file's offset be inside it.
        with server._lock:
            ns.traverse(user, path)
            st = ns.stat(path)
            if st is None:
                raise not_found(f"File {path} not found.")
            if not stat_mod.S_ISDIR(st.st_mode):
                size = st.st_size
                if size > 0 and offset >= size:
                    msg = f"Offset={offset} out of the range [0, {size}); OPEN, path={path}"
                    raise RemoteError(403, "IOException", msg)
                ns.check(user, path, "READ")
        drain(req, consumed)
        server._redirect(req, "OPEN", path, params)
        return
    with server._lock:
        server.datanode_requests["OPEN"] += 1
        st = ns.require_file(path)
        ns.check(user, path, "READ")
    if offset > st.st_size:
        raise RemoteError(403, "EOFException", "Cannot seek after EOF")
    try:
        f = open(ns.local(path), "rb")  # noqa: SIM115 (closed below)
    except (FileNotFoundError, NotADirectoryError):
        # Deleted (or renamed away) since the checks above: Hadoop's datanode opens the file
        # through the namenode, which then finds none. Once open, the bytes stay readable, as
        # a datanode serves a block it has not dropped yet.
        raise not_found(f"File does not exist: {path}") from None
    with f:
        f.seek(offset)
        data = f.read(-1 if length is None else length)
    drain(req, consumed)
    send(req, 200, data)


def op_create(server: Server, req: Handler, path: str, params: dict[str, str],
              user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    if not datanode:
        # Like Hadoop's namenode: CREATE is only redirected, the datanode step does the work.
        drain(req, consumed)
        server._redirect(req, "CREATE", path, params)
        return
    ns = server.namespace
    overwrite = params.get("overwrite", "false").lower() == "true"
    permission = params.get("permission")
    with server._lock:
        server.datanode_requests["CREATE"] += 1
        ns.check_parents_are_dirs(path)
        st = ns.stat(path)
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            msg = f"{path} already exists as a directory"
            raise RemoteError(403, "FileAlreadyExistsException", msg)
        if st is not None and overwrite:
            ns.check(user, path, "WRITE")
        ns.check(user, ns.existing_ancestor(path), "WRITE")
        if st is not None:
            if not overwrite:
                ns.check_lease(path, user, "CREATE_FILE")
                msg = f"{path} for client 127.0.0.1 already exists"
                raise RemoteError(403, "FileAlreadyExistsException", msg)
            # Overwriting deletes the old file, a writer's lease on it included: that
            # writer's upload fails when it ends.
            ns.drop_meta(path)
            os.unlink(ns.local(path))
        os.makedirs(os.path.dirname(ns.local(path)), exist_ok=True)
        f = open(ns.local(path), "wb")  # noqa: SIM115 (closed in _upload)
        mode = int(permission, 8) & 0o777 if permission else None  # no sticky bit on a file
        ns.made([path], user, mode)
        holder = ns.take_lease(path, user, 0)
    _upload(server, req, path, f, holder, consumed, 201)


def op_append(server: Server, req: Handler, path: str, params: dict[str, str],
              user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    if not datanode:
        # The namenode only looks the path up; the datanode's append checks the rest.
        with server._lock:
            ns.traverse(user, path)
            if ns.stat(path) is None:
                raise not_found(f"File {path} not found.")
        drain(req, consumed)
        server._redirect(req, "APPEND", path, params)
        return
    with server._lock:
        server.datanode_requests["APPEND"] += 1
        ns.check(user, path, "WRITE")
        st = ns.stat(path)
        if st is None:
            raise not_found(f"Failed to append to non-existent file {path} for client 127.0.0.1")
        if stat_mod.S_ISDIR(st.st_mode):
            msg = f"Cannot append to directory {path}; already exists as a directory."
            raise RemoteError(403, "FileAlreadyExistsException", msg)
        ns.check_lease(path, user, "APPEND_FILE")
        f = open(ns.local(path), "ab")  # noqa: SIM115 (closed in _upload)
        holder = ns.take_lease(path, user, st.st_size)
    _upload(server, req, path, f, holder, consumed, 200)


def _upload(server: Server, req: Handler, path: str, f: Any, holder: str, consumed: list[bool],
            status: int) -> None:  # fmt: skip
    """The datanode step of a CREATE or APPEND: the body into ``f``, under ``holder``'s lease."""
    generation = server._generation
    datanode_died = False
    consumed[0] = True
    with server._lock:
        cut_after, server.cut_next_upload_after = server.cut_next_upload_after, None
    try:
        received = 0
        for data in request_body(req):
            if cut_after is not None and received + len(data) >= cut_after:
                f.write(data[: cut_after - received])
                datanode_died = True
                raise CutOff
            f.write(data)
            f.flush()  # what was received is on disk, as a datanode's replica would be
            received += len(data)
    finally:
        f.close()
        found = False
        with server._lock:
            if generation == server._generation:  # else a restart reloaded the leases
                found = server.namespace.end_upload(holder, datanode_died)
    if generation != server._generation:
        req.close_connection = True
        return
    if not found:  # the file was deleted or overwritten meanwhile: closing it fails
        if status == 201:
            msg = f"File does not exist: {path} Holder {holder} does not have any open files."
            raise not_found(msg)
        msg = f"The file {path} does not exist or it is not under construction."
        raise RemoteError(403, "IOException", msg)
    headers = {"Location": f"hdfs://{server.host}:{server.port}{quote(path)}"}
    send(req, status, headers=headers if status == 201 else None)


def op_truncate(server: Server, req: Handler, path: str, params: dict[str, str],
                user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    newlength = long_param(params, "newlength", None)
    if newlength is None:
        msg = "Required param newlength for op: TRUNCATE is null or empty"
        raise RemoteError(400, "IllegalArgumentException", msg)
    with server._lock:
        ns.check(user, path, "WRITE")
        st = ns.require_file(path)
        lease = ns.current_lease(path)
        if lease is not None and lease.truncate_to == newlength:
            done = False  # asked again while the block is recovered: the same answer
        else:
            ns.check_lease(path, user, "TRUNCATE_FILE")
            size = st.st_size
            if newlength > size:
                msg = (
                    "Cannot truncate to a larger file size. Current size: "
                    f"{size}, truncate size: {newlength}."
                )
                raise RemoteError(400, "HadoopIllegalArgumentException", msg)
            done = ns.truncate(path, user, size, newlength)
        server.truncate_answers[done] += 1
    drain(req, consumed)
    send_json(req, 200, {"boolean": done})


def op_rename(server: Server, req: Handler, path: str, params: dict[str, str],
              user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    dst = normalize(params.get("destination", ""))
    options = {o.strip().upper() for o in params.get("renameoptions", "").split(",") if o}
    with_options = server.rename_options and bool(options)
    with server._lock:
        ns.traverse(user, path)
        ns.check_parents_are_dirs(dst)
        ns.check(user, posixpath.dirname(path), "WRITE")
        ns.check(user, ns.existing_ancestor(dst), "WRITE")
        result: bool | None = None
        if with_options:
            _rename2(ns, path, dst, "OVERWRITE" in options)
        else:
            result = _rename_boolean(ns, path, dst)
    drain(req, consumed)
    if result is None:
        send(req, 200)
    else:
        send_json(req, 200, {"boolean": result})


def _rename_boolean(ns: Namespace, src: str, dst: str) -> bool:
    """Hadoop's old RENAME: ``false`` for any refusal; onto a directory moves into it."""
    if src == "/" or ns.stat(src) is None:
        return False
    if src == dst:
        return True
    dst_st = ns.stat(dst)
    if dst_st is not None and stat_mod.S_ISDIR(dst_st.st_mode):
        dst = posixpath.join(dst, posixpath.basename(src))
        dst_st = ns.stat(dst)
    parent = ns.stat(posixpath.dirname(dst))
    if dst_st is not None or parent is None or not stat_mod.S_ISDIR(parent.st_mode):
        return False
    if dst.startswith(src.rstrip("/") + "/"):
        return False
    os.rename(ns.local(src), ns.local(dst))
    ns.move_meta(src, dst)
    return True


def _rename2(ns: Namespace, src: str, dst: str, overwrite: bool) -> None:
    """Hadoop's rename2 (``renameoptions``): an error for each refusal, in Hadoop's order."""
    src_st = ns.stat(src)
    if src_st is None:
        raise not_found(f"rename source {src} is not found.")
    if src == "/":
        raise RemoteError(403, "IOException", "rename source cannot be the root")
    if src == dst:
        msg = f"The source {src} and destination {dst} are the same"
        raise RemoteError(403, "FileAlreadyExistsException", msg)
    if dst.startswith(src.rstrip("/") + "/"):
        msg = f"Rename destination {dst} is a directory or file under source {src}"
        raise RemoteError(403, "IOException", msg)
    if dst == "/":
        raise RemoteError(403, "IOException", "rename destination cannot be the root")
    dst_st = ns.stat(dst)
    if dst_st is not None:
        src_dir = stat_mod.S_ISDIR(src_st.st_mode)
        dst_dir = stat_mod.S_ISDIR(dst_st.st_mode)
        if src_dir != dst_dir:
            msg = f"Source {src} and destination {dst} must both be directories"
            raise RemoteError(403, "IOException", msg)
        if not overwrite:
            msg = f"rename destination {dst} already exists"
            raise RemoteError(403, "FileAlreadyExistsException", msg)
        if dst_dir and os.listdir(ns.local(dst)):
            msg = f"rename destination directory is not empty: {dst}"
            raise RemoteError(403, "IOException", msg)
    elif ns.stat(posixpath.dirname(dst)) is None:
        raise not_found(f"rename destination parent {dst} not found.")
    if dst_st is not None:
        ns.drop_meta(dst)
    os.replace(ns.local(src), ns.local(dst))
    ns.move_meta(src, dst)


def op_delete(server: Server, req: Handler, path: str, params: dict[str, str],
              user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    recursive = params.get("recursive", "false").lower() == "true"
    with server._lock:
        ns.traverse(user, path)
        st = ns.stat(path)
        is_dir = st is not None and stat_mod.S_ISDIR(st.st_mode)
        local = ns.local(path)
        # Permissions first (the parent, all of the tree even when not recursive), then
        # whether a directory is empty.
        if path != "/":
            ns.check(user, posixpath.dirname(path), "WRITE")
        if is_dir:
            ns.check_subtree(user, path)
        if is_dir and not recursive and os.listdir(local):
            msg = f"`{path} is non empty': Directory is not empty"
            raise RemoteError(403, "PathIsNotEmptyDirectoryException", msg)
        if st is None or path == "/":
            result = False  # missing; and the root is never deleted
        else:
            if is_dir:
                shutil.rmtree(local)
            else:
                os.unlink(local)
            ns.drop_meta(path)
            result = True
    drain(req, consumed)
    send_json(req, 200, {"boolean": result})


def op_mkdirs(server: Server, req: Handler, path: str, params: dict[str, str],
              user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    permission = int(params.get("permission") or "755", 8)
    with server._lock:
        ns.check_parents_are_dirs(path)
        st = ns.stat(path)
        if st is not None and not stat_mod.S_ISDIR(st.st_mode):
            raise RemoteError(403, "FileAlreadyExistsException", f"Path is not a directory: {path}")
        if st is None:
            ns.check(user, ns.existing_ancestor(path), "WRITE")
            missing = []
            p = path
            while ns.stat(p) is None:
                missing.append(p)
                p = posixpath.dirname(p)
            os.makedirs(ns.local(path), exist_ok=True)
            # The default mode is not stored.
            ns.made(missing, user, permission if permission != 0o755 else None)
    drain(req, consumed)
    send_json(req, 200, {"boolean": True})


def op_setpermission(server: Server, req: Handler, path: str, params: dict[str, str],
                     user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    ns = server.namespace
    with server._lock:
        ns.traverse(user, path)
        if ns.stat(path) is None:
            raise not_found(f"File does not exist: {path}")
        if user not in (ns.settings.superuser, ns.owner(path, user)):
            msg = f"Permission denied. user={user} is not the owner of inode={path}"
            raise RemoteError(403, "AccessControlException", msg)
        ns.set_mode(path, int(params.get("permission") or "755", 8))
    drain(req, consumed)
    send(req, 200)


def op_settimes(server: Server, req: Handler, path: str, params: dict[str, str],
                user: str, datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
    def millis(name: str) -> int:
        text = params.get(name) or "-1"
        try:
            return int(text)
        except ValueError:
            raise bad_param(name, f'Failed to parse "{text}"') from None

    ns = server.namespace
    mtime, atime = millis("modificationtime"), millis("accesstime")
    with server._lock:
        ns.check(user, path, "WRITE")
        st = ns.stat(path)
        if st is None:
            raise not_found(f"File/Directory {path} does not exist.")
        if mtime >= 0 or atime >= 0:  # -1: left as it is
            times = (
                atime * 1_000_000 if atime >= 0 else st.st_atime_ns,
                mtime * 1_000_000 if mtime >= 0 else st.st_mtime_ns,
            )
            os.utime(ns.local(path), ns=times)
    drain(req, consumed)
    send(req, 200)


OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "GETFILESTATUS"): op_getfilestatus,
    ("GET", "LISTSTATUS"): op_liststatus,
    ("GET", "LISTSTATUS_BATCH"): op_liststatus_batch,
    ("GET", "GETHOMEDIRECTORY"): op_gethomedirectory,
    ("GET", "OPEN"): op_open,
    ("PUT", "CREATE"): op_create,
    ("POST", "APPEND"): op_append,
    ("POST", "TRUNCATE"): op_truncate,
    ("PUT", "RENAME"): op_rename,
    ("DELETE", "DELETE"): op_delete,
    ("PUT", "MKDIRS"): op_mkdirs,
    ("PUT", "SETPERMISSION"): op_setpermission,
    ("PUT", "SETTIMES"): op_settimes,
}
