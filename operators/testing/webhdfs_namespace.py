"""The WebHDFS stand-in's namespace: what its namenode knows of a path beyond the bytes in the
backing directory, and the rules it answers by. The operations
(:mod:`operators.testing.webhdfs_operations`) consult it, always under the server's lock.

- The single-writer lease: while a CREATE/APPEND upload is in progress, an APPEND, a TRUNCATE
  or a CREATE without overwrite fails with AlreadyBeingCreatedException. A *datanode* that
  dies mid-upload leaves its lease in recovery for ``soft_limit`` seconds
  (RecoveryInProgressException), then the file is free. Leases survive a restart (kept under
  ``<root>/.webhdfs-stand-in/``).
- Blocks of ``block_size`` bytes: while a file is written, GETFILESTATUS reports the length it
  had plus the blocks completed since. A TRUNCATE inside a block leaves the file its old length
  and bytes while the block is recovered (``truncate_recovery`` seconds): then another TRUNCATE
  gets AlreadyBeingCreatedException, an APPEND or CREATE RecoveryInProgressException.
- HDFS permissions: a file or directory made through the server is owned by the user who made
  it; the owner gets the owner bits, everyone else the "other" bits (no groups), the superuser
  passes every check. The root is the superuser's with mode 0777, as in the sandbox; paths put
  into the backing directory by other means belong to whoever asks. Modes and owners are kept
  under ``<root>/.webhdfs-stand-in/`` too, which no request may name.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import stat as stat_mod
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from operators.testing.webhdfs_errors import RemoteError, not_found

__all__ = ["DEFAULT_BLOCK_SIZE", "STATE_DIR", "Lease", "Namespace", "Settings", "normalize"]

STATE_DIR = ".webhdfs-stand-in"
#: The sandbox's block size (``dfs.blocksize``), the smallest HDFS allows by default.
DEFAULT_BLOCK_SIZE = 1 << 20
_V = TypeVar("_V")


class Settings(Protocol):
    """The server's settings the namespace reads, at each use: a test may change them on a
    running server."""

    root: Path
    superuser: str
    soft_limit: float | None
    truncate_recovery: float
    block_size: int


@dataclass
class Lease:
    holder: str
    #: ``None`` while the upload runs; else the monotonic time the recovery ends.
    recovering_until: float | None = None
    #: The file's length when the upload began: the namenode knows no more until a block fills.
    start_length: int = 0
    #: A truncate's block recovery: the length the file has once it is over.
    truncate_to: int | None = None

    def to_json(self, path: str) -> dict[str, Any]:
        return {
            "path": path,
            "holder": self.holder,
            "start_length": self.start_length,
            "truncate_to": self.truncate_to,
        }


def normalize(path: str) -> str:
    """An HDFS path as the namenode resolves it; ``..`` and the state directory are refused."""
    norm = posixpath.normpath("/" + path.lstrip("/"))
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    parts = [p for p in norm.split("/") if p]
    if ".." in path.split("/") or (parts and parts[0] == STATE_DIR):
        raise RemoteError(400, "IllegalArgumentException", f"Invalid path name {path}")
    return norm


def _rekey(table: dict[str, _V], moved: Callable[[str], str | None]) -> bool:
    """Move the entries of ``table`` whose path ``moved`` maps to a new one; whether any did."""
    moves = {p: new for p in table if (new := moved(p)) is not None}
    values = {new: table.pop(p) for p, new in moves.items()}
    table.update(values)
    return bool(moves)


class Namespace:
    """Leases, modes and owners of the paths under ``settings.root``, and the checks on them.
    Not thread-safe: every caller holds the server's lock."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._leases: dict[str, Lease] = {}
        self._perms: dict[str, int] = {}
        self._owners: dict[str, str] = {}
        self._holders = 0

    # -- paths -----------------------------------------------------------------------------

    def local(self, path: str) -> str:
        """The backing file of an HDFS path."""
        return os.path.join(self.settings.root, path.lstrip("/"))

    def stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(self.local(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def children(self, path: str) -> list[str]:
        """The names in directory ``path`` (the state directory is none of the root's)."""
        names = os.listdir(self.local(path))
        return [n for n in names if not (path == "/" and n == STATE_DIR)]

    def require_file(self, path: str) -> os.stat_result:
        st = self.stat(path)
        if st is None:
            raise not_found(f"File does not exist: {path}")
        if stat_mod.S_ISDIR(st.st_mode):
            raise not_found(f"Path is not a file: {path}")
        return st

    def existing_ancestor(self, path: str) -> str:
        p = posixpath.dirname(path)
        while p != "/" and self.stat(p) is None:
            p = posixpath.dirname(p)
        return p

    def check_parents_are_dirs(self, path: str) -> None:
        p = posixpath.dirname(path)
        while p != "/":
            st = self.stat(p)
            if st is not None and not stat_mod.S_ISDIR(st.st_mode):
                raise RemoteError(403, "ParentNotDirectoryException", f"{p} (is not a directory)")
            p = posixpath.dirname(p)
        # a file somewhere above makes os.stat fail with ENOTDIR; checked above

    def file_status(self, path: str, st: os.stat_result, suffix: str, user: str) -> dict[str, Any]:
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        length = 0 if is_dir else st.st_size
        lease = None if is_dir else self.current_lease(path)
        block_size = self.settings.block_size
        if lease is not None and lease.truncate_to is None:
            # The namenode learns a file's new bytes block by block (or when it is closed).
            complete = length - length % block_size
            length = min(length, max(lease.start_length, complete))
        children = 0
        if is_dir:
            try:
                children = len(os.listdir(self.local(path)))
            except OSError:
                children = 0
        return {
            "accessTime": 0 if is_dir else st.st_atime_ns // 1_000_000,
            "blockSize": 0 if is_dir else block_size,
            "childrenNum": children,
            "fileId": st.st_ino,
            "group": "supergroup",
            "length": length,
            "modificationTime": st.st_mtime_ns // 1_000_000,
            "owner": self.owner(path, user),
            "pathSuffix": suffix,
            "permission": f"{self.mode(path, is_dir):o}",
            "replication": 0 if is_dir else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if is_dir else "FILE",
        }

    # -- permissions -----------------------------------------------------------------------

    def mode(self, path: str, is_dir: bool) -> int:
        default = 0o777 if path == "/" else 0o755 if is_dir else 0o644
        return self._perms.get(path, default)

    def owner(self, path: str, user: str) -> str:
        """Who owns ``path``: its maker; the root is the superuser's; others whoever asks."""
        return self._owners.get(path, self.settings.superuser if path == "/" else user)

    def made(self, paths: list[str], user: str, mode: int | None) -> None:
        """``user`` made ``paths``: their owner; ``mode`` theirs unless ``None`` (the default)."""
        for p in paths:
            if mode is not None:
                self._perms[p] = mode
            self._owners[p] = user
        self._save_meta()

    def set_mode(self, path: str, mode: int) -> None:
        self._perms[path] = mode
        self._save_meta()

    @staticmethod
    def _mode_string(mode: int, is_dir: bool) -> str:
        out = "d" if is_dir else "-"
        for shift in (6, 3, 0):
            bits = (mode >> shift) & 7
            out += ("r" if bits & 4 else "-") + ("w" if bits & 2 else "-")
            out += "x" if bits & 1 else "-"
        if mode & 0o1000:
            out = out[:-1] + ("t" if mode & 1 else "T")
        return out

    def traverse(self, user: str, path: str) -> None:
        """Hadoop's path resolution: execute on every existing ancestor of ``path``; a file
        among them is refused (as AccessControlException; CREATE, MKDIRS and a RENAME's
        target say ParentNotDirectoryException first, see :meth:`check_parents_are_dirs`)."""
        ancestors = []
        p = path
        while p != "/":
            p = posixpath.dirname(p)
            ancestors.append(p)
        for anc in reversed(ancestors):
            st = self.stat(anc)
            if st is None:
                break
            if not stat_mod.S_ISDIR(st.st_mode):
                raise RemoteError(403, "AccessControlException", f"{anc} (is not a directory)")
            if user != self.settings.superuser:
                self._require(user, anc, True, 1, "EXECUTE")

    def check(self, user: str, path: str, access: str) -> None:
        """HDFS permission check: :meth:`traverse` to ``path``, ``access`` on ``path``."""
        self.traverse(user, path)
        if user == self.settings.superuser:
            return
        want = {"READ": 4, "WRITE": 2, "EXECUTE": 1, "READ_EXECUTE": 5, "ALL": 7}[access]
        st = self.stat(path)
        if st is not None:
            self._require(user, path, stat_mod.S_ISDIR(st.st_mode), want, access)

    def _require(self, user: str, path: str, is_dir: bool, want: int, access: str) -> None:
        mode = self.mode(path, is_dir)
        owner = self.owner(path, user)
        bits = (mode >> 6) & 7 if user == owner else mode & 7
        if bits & want != want:
            inode = f'"{path}":{owner}:supergroup:{self._mode_string(mode, is_dir)}'
            msg = f"Permission denied: user={user}, access={access}, inode={inode}"
            raise RemoteError(403, "AccessControlException", msg)

    def check_subtree(self, user: str, path: str) -> None:
        """A DELETE needs all access to every non-empty directory of the tree."""
        if user == self.settings.superuser:
            return
        local = self.local(path)
        for dirpath, dirnames, filenames in os.walk(local):
            dirnames.sort()
            if dirpath == local and path == "/" and STATE_DIR in dirnames:
                dirnames.remove(STATE_DIR)
            if dirnames or filenames:
                rel = os.path.relpath(dirpath, local)
                sub = path if rel == "." else posixpath.join(path, rel.replace(os.sep, "/"))
                self._require(user, sub, True, 7, "ALL")

    # -- leases ----------------------------------------------------------------------------

    def current_lease(self, path: str) -> Lease | None:
        lease = self._leases.get(path)
        if (
            lease is not None
            and lease.recovering_until is not None
            and time.monotonic() >= lease.recovering_until
        ):
            self._end_recovery(path, lease)
            return None
        return lease

    def lease_state(self, path: str) -> str | None:
        """``"writing"``, ``"recovering"`` or ``None``."""
        lease = self.current_lease(path)
        if lease is None:
            return None
        return "writing" if lease.recovering_until is None else "recovering"

    def check_lease(self, path: str, user: str, action: str) -> None:
        """Refuse ``action`` (APPEND_FILE, CREATE_FILE, TRUNCATE_FILE) while a lease is held."""
        lease = self.current_lease(path)
        if lease is None:
            return
        start = f"Failed to {action} {path} for {user} on 127.0.0.1 because"
        if lease.recovering_until is None:
            raise RemoteError(
                403,
                "AlreadyBeingCreatedException",
                f"{start} this file lease is currently owned by {lease.holder} on 127.0.0.1",
            )
        if lease.truncate_to is not None:
            if action == "TRUNCATE_FILE":
                msg = f"{start} {path} is being truncated."
                raise RemoteError(403, "AlreadyBeingCreatedException", msg)
            msg = f"{start} another recovery is in progress by {lease.holder} on 127.0.0.1"
            raise RemoteError(403, "RecoveryInProgressException", msg)
        raise RemoteError(
            403,
            "RecoveryInProgressException",
            f"{start} lease recovery is in progress. Try again later.",
        )

    def take_lease(self, path: str, user: str, start_length: int) -> str:
        """An upload's lease on ``path``; its holder's name."""
        self._holders += 1
        holder = f"DFSClient_webhdfs_{user}_{os.getpid()}_{self._holders}"
        lease = Lease(holder, start_length=start_length)
        self._leases[path] = lease
        self._save_lease(path, lease)
        return holder

    def end_upload(self, holder: str, datanode_died: bool) -> bool:
        """The upload of ``holder`` is over: its lease goes into recovery if its datanode died,
        else away. Whether the lease was still there (its file not deleted or overwritten)."""
        found = False
        for p, lease in list(self._leases.items()):
            if lease.holder != holder:
                continue
            found = True
            if datanode_died:
                lease.recovering_until = self._recovery_deadline()
            else:
                # Done, or the client went away: the datanode closes the file.
                self._drop_lease(p)
        return found

    def truncate(self, path: str, user: str, size: int, newlength: int) -> bool:
        """Truncate ``path`` (``size`` bytes) to ``newlength``: whether that is done (on a block
        boundary whole blocks go); else its last block is recovered for ``truncate_recovery``
        seconds, the file keeping its old bytes until then."""
        done = newlength == size or newlength % self.settings.block_size == 0
        if done or self.settings.truncate_recovery <= 0:
            os.truncate(self.local(path), newlength)
            return done
        self._holders += 1
        lease = Lease(
            f"DFSClient_truncate_{user}_{os.getpid()}_{self._holders}",
            time.monotonic() + self.settings.truncate_recovery,
            size,
            newlength,
        )
        self._leases[path] = lease
        self._save_lease(path, lease)
        return done

    def recover(self, path: str | None = None) -> None:
        """End the recoveries (of dead writers' leases, of truncated blocks) now, of ``path``
        or all."""
        for p, lease in list(self._leases.items()):
            if lease.recovering_until is not None and path in (None, p):
                self._end_recovery(p, lease)

    def _recovery_deadline(self) -> float:
        if self.settings.soft_limit is None:
            return float("inf")
        return time.monotonic() + self.settings.soft_limit

    def _end_recovery(self, path: str, lease: Lease) -> None:
        if lease.truncate_to is not None:
            with contextlib.suppress(OSError):
                os.truncate(self.local(path), lease.truncate_to)
        self._drop_lease(path)

    # -- a path moved or gone --------------------------------------------------------------

    def move_meta(self, src: str, dst: str) -> None:
        """``src`` (and all below it) is now ``dst``: its modes, owners and leases follow."""

        def moved(p: str) -> str | None:
            if p == src:
                return dst
            if p.startswith(src.rstrip("/") + "/"):
                return dst + p[len(src) :]
            return None

        # ``|``, not ``or``: both tables must be re-keyed.
        changed = _rekey(self._perms, moved) | _rekey(self._owners, moved)
        if changed:
            self._save_meta()
        for p in list(self._leases):
            new = moved(p)
            if new is not None:
                lease = self._leases[p]
                self._drop_lease(p)
                self._leases[new] = lease
                self._save_lease(new, lease)

    def drop_meta(self, path: str) -> None:
        """``path`` (and all below it) is gone: so are its modes, owners and leases."""
        prefix = path.rstrip("/") + "/"
        changed = False
        for table in (self._perms, self._owners):
            gone = [p for p in table if p == path or p.startswith(prefix)]
            for p in gone:
                del table[p]
            changed = changed or bool(gone)
        if changed:
            self._save_meta()
        for p in [p for p in self._leases if p == path or p.startswith(prefix)]:
            self._drop_lease(p)

    # -- kept on disk ----------------------------------------------------------------------

    def _state(self, *parts: str) -> Path:
        return self.settings.root.joinpath(STATE_DIR, *parts)

    def prepare(self) -> None:
        """Make the state directory (before the server starts)."""
        self._state("leases").mkdir(parents=True, exist_ok=True)

    def load(self) -> None:
        """Read the leases, modes and owners kept on disk (when the server starts)."""
        self._leases.clear()
        # A restarted namenode finds the leases of the writers that were cut off.
        until = self._recovery_deadline()
        for entry in self._state("leases").iterdir():
            try:
                data = json.loads(entry.read_text())
                lease = Lease(
                    data["holder"],
                    until,
                    int(data.get("start_length") or 0),
                    data.get("truncate_to"),
                )
            except (OSError, ValueError, KeyError):
                continue
            if lease.truncate_to is not None:
                lease.recovering_until = time.monotonic() + self.settings.truncate_recovery
            self._leases[data["path"]] = lease
        try:
            meta = json.loads(self._state("meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        self._perms = {p: int(m) for p, m in meta.get("permissions", {}).items()}
        self._owners = {p: str(u) for p, u in meta.get("owners", {}).items()}

    def _save_lease(self, path: str, lease: Lease) -> None:
        self._write_state(self._state("leases", quote(path, safe="")), lease.to_json(path))

    def _drop_lease(self, path: str) -> None:
        self._leases.pop(path, None)
        with contextlib.suppress(FileNotFoundError):
            self._state("leases", quote(path, safe="")).unlink()

    def _save_meta(self) -> None:
        meta = {"permissions": self._perms, "owners": self._owners}
        self._write_state(self._state("meta.json"), meta)

    @staticmethod
    def _write_state(target: Path, data: object) -> None:
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, target)
