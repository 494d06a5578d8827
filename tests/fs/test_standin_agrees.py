"""The WebHDFS stand-in (operators/testing/webhdfs_server.py) answers as Hadoop 3.4.1 does.

Each scenario sends the same raw WebHDFS requests (``requests``, a 307 followed or not, uploads
held open on a raw socket) to the stand-in, as the tests start it, and to the sandbox's
MiniDFSCluster, and records what matters to our backend: the status code, the RemoteException's
``exception`` and ``javaClassName``, ``{"boolean": ...}`` answers, lengths and bytes. The two
records must be equal, so a difference (a drift of the stand-in, or a new Hadoop) shows as the
step where they part. The stand-in's block size is the sandbox's (1 MiB).
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from operators.sandbox import Sandbox
from operators.testing.webhdfs_server import WebHdfsServer
from tests.conftest import CLUSTER_USER

PREFIX = "/webhdfs/v1"
MIB = 1 << 20
TIMEOUT = 20.0
_METHODS = {
    "GETFILESTATUS": "GET",
    "GETHOMEDIRECTORY": "GET",
    "LISTSTATUS": "GET",
    "OPEN": "GET",
    "CREATE": "PUT",
    "MKDIRS": "PUT",
    "RENAME": "PUT",
    "SETPERMISSION": "PUT",
    "SETTIMES": "PUT",
    "APPEND": "POST",
    "TRUNCATE": "POST",
    "DELETE": "DELETE",
}
_counter = itertools.count()

Record = dict[str, Any]


@dataclass
class Target:
    """One server under test, and a fresh directory on it for one scenario."""

    name: str
    url: str  # http://host:port of the namenode
    base: str
    superuser: str
    server: WebHdfsServer | None = None  # the stand-in, to widen its recovery window
    session: requests.Session = field(default_factory=requests.Session)

    def path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def call(
        self,
        op: str,
        path: str,
        *,
        user: str = CLUSTER_USER,
        follow: bool = False,
        data: bytes | None = None,
        **params: str,
    ) -> requests.Response:
        """One request; with ``follow``, a 307 is followed by hand with ``data`` as the body."""
        method = _METHODS[op]
        query = {"op": op, "user.name": user, **params}
        res = self.session.request(
            method,
            f"{self.url}{PREFIX}{path}",
            params=query,
            allow_redirects=False,
            timeout=TIMEOUT,
        )
        if follow and res.status_code == 307:
            location = res.headers["Location"]
            res = self.session.request(
                method, location, data=data, allow_redirects=False, timeout=TIMEOUT
            )
        return res

    def put(self, path: str, data: bytes, user: str = CLUSTER_USER) -> None:
        res = self.call("CREATE", path, user=user, follow=True, data=data, overwrite="true")
        assert res.status_code == 201, (self.name, path, res.status_code, res.text[:300])

    def status(self, path: str, key: str, user: str = CLUSTER_USER) -> Any:
        """A field of the path's FileStatus, or what the server answered instead."""
        res = self.call("GETFILESTATUS", path, user=user)
        return res.json()["FileStatus"][key] if res.status_code == 200 else seen(res)

    def length(self, path: str) -> Any:
        return self.status(path, "length")

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: gave up waiting for {what}")
            time.sleep(0.02)

    @contextlib.contextmanager
    def recovery_window(self, seconds: float) -> Iterator[None]:
        """Let the stand-in's block recovery outlast the checks made during it (its length is
        not what is compared; the sandbox's depends on when a DataNode heartbeats)."""
        server = self.server
        if server is None:
            yield
            return
        before, server.truncate_recovery = server.truncate_recovery, seconds
        try:
            yield
        finally:
            server.truncate_recovery = before


def seen(res: requests.Response) -> tuple[Any, ...]:
    """What an answer tells the backend: status and exception, boolean, or body."""
    try:
        body = res.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "RemoteException" in body:
        exc = body["RemoteException"]
        return (res.status_code, exc.get("exception"), exc.get("javaClassName"))
    if isinstance(body, dict) and "boolean" in body:
        return (res.status_code, body["boolean"])
    if isinstance(body, dict):
        return (res.status_code, sorted(body))
    content = res.content
    return (res.status_code, content if len(content) <= 64 else f"{len(content)} bytes")


# -- uploads held open ------------------------------------------------------------------------


class HeldUpload:
    """A CREATE/APPEND whose body is still being sent (its lease held) on a raw socket."""

    def __init__(self, target: Target, op: str, path: str, first: bytes, total: int) -> None:
        step1 = target.call(op, path, **({"overwrite": "true"} if op == "CREATE" else {}))
        assert step1.status_code == 307, (target.name, seen(step1))
        location = urlsplit(step1.headers["Location"])
        self.method = _METHODS[op]
        self.sock = socket.create_connection((location.hostname, location.port), timeout=TIMEOUT)
        head = (
            f"{self.method} {location.path}?{location.query} HTTP/1.1\r\n"
            f"Host: {location.netloc}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {total}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + first)

    def finish(self, rest: bytes) -> tuple[Any, ...]:
        """Send the rest of the body; the datanode's answer, as :func:`seen` tells it."""
        self.sock.sendall(rest)
        res = http.client.HTTPResponse(self.sock, method=self.method)  # skips 100 Continue
        try:
            res.begin()
            body = res.read()
        finally:
            res.close()
            self.sock.close()
        fake = requests.Response()
        fake.status_code, fake._content = res.status, body
        return seen(fake)

    def close(self) -> None:
        """The client goes away mid-upload."""
        self.sock.close()


def hold(target: Target, op: str, path: str, first: bytes, total: int) -> HeldUpload:
    """Start an upload and wait until the server holds its lease (a TRUNCATE to the file's
    length, a no-op otherwise, is refused)."""
    before = target.length(path)
    length = before if isinstance(before, int) else 0
    upload = HeldUpload(target, op, path, first, total)

    def held() -> bool:
        res = target.call("TRUNCATE", path, newlength=str(length))
        return seen(res)[1:2] == ("AlreadyBeingCreatedException",)

    target.wait_for(f"the lease of the {op} on {path}", held)
    return upload


# -- scenarios --------------------------------------------------------------------------------


def create_on_an_existing_path(t: Target) -> Record:
    f, d = t.path("f"), t.path("d")
    t.put(f, b"abc")
    t.call("MKDIRS", d)
    return {
        "CREATE existing, no overwrite": seen(t.call("CREATE", f, follow=True, data=b"x")),
        "content kept": seen(t.call("OPEN", f, follow=True)),
        "CREATE existing, overwrite": seen(
            t.call("CREATE", f, follow=True, data=b"new", overwrite="true")
        ),
        "content replaced": seen(t.call("OPEN", f, follow=True)),
        "CREATE onto a directory": seen(
            t.call("CREATE", d, follow=True, data=b"x", overwrite="true")
        ),
        "CREATE under a file": seen(t.call("CREATE", f + "/x", follow=True, data=b"x")),
        "CREATE, parents missing": seen(t.call("CREATE", t.path("p/q/g"), follow=True, data=b"")),
        "parents made": seen(t.call("GETFILESTATUS", t.path("p/q"))),
        "CREATE with permission 1777": seen(
            t.call("CREATE", t.path("h"), follow=True, data=b"", permission="1777")
        ),
        "its permission": t.status(t.path("h"), "permission"),
    }


def append_to_a_missing_file_or_a_directory(t: Target) -> Record:
    f, d = t.path("f"), t.path("d")
    t.put(f, b"abc")
    t.call("MKDIRS", d)
    return {
        "APPEND missing, namenode step": seen(t.call("APPEND", t.path("nope"))),
        "APPEND missing, followed": seen(t.call("APPEND", t.path("nope"), follow=True, data=b"x")),
        "APPEND under a file": seen(t.call("APPEND", f + "/x")),
        "APPEND directory, namenode step": seen(t.call("APPEND", d)),
        "APPEND directory, followed": seen(t.call("APPEND", d, follow=True, data=b"x")),
        "APPEND file": seen(t.call("APPEND", f, follow=True, data=b"d")),
        "content": seen(t.call("OPEN", f, follow=True)),
    }


def the_lease_of_an_upload_in_progress(t: Target) -> Record:
    f, g, n = t.path("f"), t.path("g"), t.path("n")
    t.put(f, b"abc")
    out: Record = {}
    upload = hold(t, "APPEND", f, b"012", 10)
    out["length while appended"] = t.length(f)
    out["APPEND"] = seen(t.call("APPEND", f, follow=True, data=b"x"))
    out["CREATE, no overwrite"] = seen(t.call("CREATE", f, follow=True, data=b"x"))
    out["TRUNCATE"] = seen(t.call("TRUNCATE", f, newlength="1"))
    out["TRUNCATE longer"] = seen(t.call("TRUNCATE", f, newlength="99"))
    out["RENAME away"] = seen(t.call("RENAME", f, destination=g, renameoptions="NONE"))
    out["the upload ends"] = upload.finish(b"3456789")
    out["renamed file"] = seen(t.call("OPEN", g, follow=True))
    # A CREATE with overwrite replaces a file being written; the writer fails at its end.
    upload = hold(t, "APPEND", g, b"0", 5)
    out["CREATE overwrite of a file being written"] = seen(
        t.call("CREATE", g, follow=True, data=b"new", overwrite="true")
    )
    out["the overwritten upload ends"] = upload.finish(b"1234")
    out["the new file"] = seen(t.call("OPEN", g, follow=True))
    # A file being created.
    upload = hold(t, "CREATE", n, b"AB", 10)
    out["length while created"] = t.length(n)
    out["APPEND to a file being created"] = seen(t.call("APPEND", n, follow=True, data=b"x"))
    out["DELETE of a file being created"] = seen(t.call("DELETE", n))
    out["the deleted upload ends"] = upload.finish(b"CDEFGHIJ")
    out["after"] = seen(t.call("GETFILESTATUS", n))
    return out


def a_client_gone_mid_upload(t: Target) -> Record:
    f = t.path("f")
    t.put(f, b"abc")
    upload = hold(t, "APPEND", f, b"0123", 100)
    upload.close()  # the datanode closes the file with the bytes it received
    refusals: set[str] = set()
    answers: list[tuple[Any, ...]] = []

    def closed() -> bool:
        answers.append(seen(t.call("TRUNCATE", f, newlength="7")))  # a no-op once closed
        if answers[-1][1] in ("AlreadyBeingCreatedException", "RecoveryInProgressException"):
            refusals.add(answers[-1][1])
            return False
        return True

    t.wait_for("the file to be closed", closed)
    return {
        # No lease recovery: the lease stays with the upload until the file is closed.
        "refused as being written, meanwhile": refusals <= {"AlreadyBeingCreatedException"},
        "then": answers[-1],
        "length": t.length(f),
        "APPEND": seen(t.call("APPEND", f, follow=True, data=b"z")),
        "content": seen(t.call("OPEN", f, follow=True)),
    }


def rename(t: Target) -> Record:
    a, b, d, e = t.path("a"), t.path("b"), t.path("d"), t.path("e")
    t.put(a, b"A")
    t.put(b, b"B")
    t.call("MKDIRS", t.path("d", "sub"))
    t.call("MKDIRS", e)
    out: Record = {}
    for options in (None, "NONE", "OVERWRITE"):
        extra = {} if options is None else {"renameoptions": options}
        key = f"renameoptions={options}" if options else "no renameoptions"
        out[f"{key}: onto an existing file"] = seen(t.call("RENAME", a, destination=b, **extra))
        t.put(a, b"A")
        out[f"{key}: missing source"] = seen(
            t.call("RENAME", t.path("nope"), destination=t.path("x"), **extra)
        )
        out[f"{key}: missing target parent"] = seen(
            t.call("RENAME", a, destination=t.path("np", "x"), **extra)
        )
        out[f"{key}: target parent is a file"] = seen(
            t.call("RENAME", a, destination=b + "/x", **extra)
        )
        out[f"{key}: onto itself"] = seen(t.call("RENAME", a, destination=a, **extra))
        out[f"{key}: into its own subtree"] = seen(
            t.call("RENAME", d, destination=t.path("d", "sub", "x"), **extra)
        )
        out[f"{key}: onto a non-empty directory"] = seen(
            t.call("RENAME", e, destination=d, **extra)
        )
        if options is not None:  # the old RENAME would move the file into the directory
            out[f"{key}: a file onto a directory"] = seen(
                t.call("RENAME", a, destination=e, **extra)
            )
    out["OVERWRITE: an empty directory onto an empty directory"] = seen(
        t.call("RENAME", e, destination=t.path("d", "sub"), renameoptions="OVERWRITE")
    )
    out["the old RENAME: a file onto a directory"] = seen(t.call("RENAME", a, destination=d))
    out["moved into it"] = seen(t.call("OPEN", t.path("d", "a"), follow=True))
    out["the root"] = seen(t.call("RENAME", "/", destination=t.path("r"), renameoptions="NONE"))
    return out


def delete(t: Target) -> Record:
    d = t.path("d")
    t.put(t.path("d", "f"), b"x")
    t.put(t.path("g"), b"x")
    return {
        "a non-empty directory, not recursive": seen(t.call("DELETE", d)),
        "missing": seen(t.call("DELETE", t.path("nope"))),
        "under a file": seen(t.call("DELETE", t.path("g", "x"))),
        "a file": seen(t.call("DELETE", t.path("g"))),
        "a directory, recursive": seen(t.call("DELETE", d, recursive="true")),
        "gone": seen(t.call("GETFILESTATUS", d)),
    }


def mkdirs(t: Target) -> Record:
    f = t.path("f")
    t.put(f, b"x")
    out = {
        "over a file": seen(t.call("MKDIRS", f)),
        "under a file": seen(t.call("MKDIRS", f + "/d")),
        "new, with its parents": seen(t.call("MKDIRS", t.path("a", "b"), permission="700")),
        "existing": seen(t.call("MKDIRS", t.path("a", "b"))),
        "/": seen(t.call("MKDIRS", "/")),
        "sticky": seen(t.call("MKDIRS", t.path("s"), permission="1777")),
    }
    for p in ("a", "a/b", "s"):
        out[f"permission of {p}"] = t.status(t.path(p), "permission")
    return out


def file_status_fields(t: Target) -> Record:
    f, d = t.path("f"), t.path("d")
    before = time.time_ns() // 1_000_000
    t.put(f, b"abc")
    t.call("MKDIRS", d)
    after = time.time_ns() // 1_000_000
    file = t.call("GETFILESTATUS", f).json()["FileStatus"]
    dir_ = t.call("GETFILESTATUS", d).json()["FileStatus"]
    listed = t.call("LISTSTATUS", t.base).json()["FileStatuses"]["FileStatus"]
    alone = t.call("LISTSTATUS", f).json()["FileStatuses"]["FileStatus"]
    mtime = file["modificationTime"]
    out: Record = {
        "file fields": sorted(file),
        "directory fields": sorted(dir_),
        "listed fields": sorted({k for entry in listed for k in entry}),
        "listed": [(e["pathSuffix"], e["type"], e["length"]) for e in listed],
        "a file listed": [(e["pathSuffix"], e["type"], e["length"]) for e in alone],
        # Milliseconds since the epoch, as integers, taken from the same clock.
        "modificationTime is ms now": isinstance(mtime, int)
        and before - 2000 <= mtime <= after + 2000,
        "SETTIMES": seen(t.call("SETTIMES", f, modificationtime="1234567890123")),
        "SETTIMES of a missing path": seen(
            t.call("SETTIMES", t.path("nope"), modificationtime="1")
        ),
        "modificationTime after SETTIMES": t.status(f, "modificationTime"),
        "GETFILESTATUS missing": seen(t.call("GETFILESTATUS", t.path("nope"))),
        "LISTSTATUS missing": seen(t.call("LISTSTATUS", t.path("nope"))),
        "GETFILESTATUS under a file": seen(t.call("GETFILESTATUS", f + "/x")),
    }
    for name, st in (("file", file), ("directory", dir_)):
        for key in ("type", "length", "owner", "group", "permission", "blockSize", "pathSuffix"):
            out[f"{name} {key}"] = st[key]
        out[f"{name} childrenNum"] = st["childrenNum"]
        out[f"{name} accessTime is 0"] = st["accessTime"] == 0
        out[f"{name} replication is 0"] = st["replication"] == 0
    return out


def truncate(t: Target) -> Record:
    f = t.path("f")
    t.put(f, b"x" * MIB + b"y" * 100)
    out: Record = {
        "longer": seen(t.call("TRUNCATE", f, newlength=str(MIB + 200))),
        "equal": seen(t.call("TRUNCATE", f, newlength=str(MIB + 100))),
        "to a block boundary": seen(t.call("TRUNCATE", f, newlength=str(MIB))),
        "length after it": t.length(f),
        "to 0": seen(t.call("TRUNCATE", f, newlength="0")),
        "missing": seen(t.call("TRUNCATE", t.path("nope"), newlength="0")),
        "a directory": seen(t.call("TRUNCATE", t.base, newlength="0")),
        "negative": seen(t.call("TRUNCATE", f, newlength="-1")),
        "no newlength": seen(t.call("TRUNCATE", f)),
    }
    data = bytes(range(100))
    # Inside a block: false, and the block is recovered. The sandbox's recovery ends at a
    # DataNode heartbeat, 0.07 s to 1 s later: the checks count only if it is still on after
    # them (the length still the old one), else they are made again on a new file.
    for attempt in range(8):
        g = t.path(f"g{attempt}")
        t.put(g, data)
        with t.recovery_window(0.3):
            during: Record = {
                "inside a block": seen(t.call("TRUNCATE", g, newlength="10")),
                # The old length and bytes; the file refused to others.
                "length during the recovery": t.length(g),
                "the same TRUNCATE again": seen(t.call("TRUNCATE", g, newlength="10")),
                "another TRUNCATE": seen(t.call("TRUNCATE", g, newlength="5")),
                "APPEND": seen(t.call("APPEND", g, follow=True, data=b"z")),
                "CREATE, no overwrite": seen(t.call("CREATE", g, follow=True, data=b"z")),
                "OPEN during the recovery": seen(t.call("OPEN", g, follow=True)) == (200, data),
            }
            if t.length(g) == len(data):
                break
    else:
        raise AssertionError(f"{t.name}: every block recovery ended within the checks")
    out.update(during)
    t.wait_for("the block recovery", lambda: t.length(g) != len(data))
    out["length after the recovery"] = t.length(g)
    out["content after the recovery"] = seen(t.call("OPEN", g, follow=True))
    return out


def open_(t: Target) -> Record:
    f, e, d = t.path("f"), t.path("e"), t.path("d")
    t.put(f, b"abc")
    t.put(e, b"")
    t.call("MKDIRS", d)
    return {
        "missing": seen(t.call("OPEN", t.path("nope"))),
        "a directory, namenode step": seen(t.call("OPEN", d)),
        "a directory, followed": seen(t.call("OPEN", d, follow=True)),
        "offset past the end": seen(t.call("OPEN", f, offset="5")),
        "offset at the end": seen(t.call("OPEN", f, offset="3")),
        "offset and length": seen(t.call("OPEN", f, follow=True, offset="1", length="1")),
        "length past the end": seen(t.call("OPEN", f, follow=True, offset="1", length="10")),
        "empty file": seen(t.call("OPEN", e, follow=True)),
        "empty file, offset 5, namenode step": seen(t.call("OPEN", e, offset="5")),
        "empty file, offset 5, followed": seen(t.call("OPEN", e, follow=True, offset="5")),
        "negative offset": seen(t.call("OPEN", f, offset="-1")),
        "offset not a number": seen(t.call("OPEN", f, offset="abc")),
        "negative length": seen(t.call("OPEN", f, length="-1")),
    }


def permissions(t: Target) -> Record:
    su = t.superuser
    ro, mine = t.path("ro"), t.path("mine")
    t.call("MKDIRS", ro, user=su)
    t.put(t.path("ro", "f"), b"abc", user=su)
    t.put(t.path("ro", "g"), b"abc", user=su)
    t.put(t.path("other"), b"o")
    t.call("SETPERMISSION", t.path("ro", "f"), permission="666", user=su)
    t.call("SETPERMISSION", ro, permission="555", user=su)
    g = t.path("ro", "g")
    out: Record = {
        "CREATE in it": seen(t.call("CREATE", t.path("ro", "x"), follow=True, data=b"x")),
        "CREATE overwrite in it": seen(
            t.call("CREATE", g, follow=True, data=b"x", overwrite="true")
        ),
        "MKDIRS in it": seen(t.call("MKDIRS", t.path("ro", "x", "y"))),
        "DELETE in it": seen(t.call("DELETE", g)),
        "DELETE of a missing path in it": seen(t.call("DELETE", t.path("ro", "nope"))),
        "DELETE it, recursive": seen(t.call("DELETE", ro, recursive="true")),
        "RENAME out of it": seen(
            t.call("RENAME", g, destination=t.path("g2"), renameoptions="NONE")
        ),
        "RENAME into it": seen(
            t.call("RENAME", t.path("other"), destination=t.path("ro", "o"), renameoptions="NONE")
        ),
        "APPEND to a 0666 file in it": seen(
            t.call("APPEND", t.path("ro", "f"), follow=True, data=b"x")
        ),
        "APPEND to a 0644 file, namenode step": seen(t.call("APPEND", g)),
        "APPEND to a 0644 file, followed": seen(t.call("APPEND", g, follow=True, data=b"x")),
        "TRUNCATE a 0644 file": seen(t.call("TRUNCATE", g, newlength="0")),
        "SETTIMES of a 0644 file": seen(t.call("SETTIMES", g, modificationtime="1")),
        "SETPERMISSION, not the owner": seen(t.call("SETPERMISSION", ro, permission="777")),
        "GETFILESTATUS in it": seen(t.call("GETFILESTATUS", g)),
        "owner is the superuser": t.status(ro, "owner") == su,
        "OPEN in it": seen(t.call("OPEN", g, follow=True)),
    }
    t.call("SETPERMISSION", ro, permission="700", user=su)
    out["0700: GETFILESTATUS in it"] = seen(t.call("GETFILESTATUS", g))
    out["0700: LISTSTATUS"] = seen(t.call("LISTSTATUS", ro))
    out["0700: OPEN in it"] = seen(t.call("OPEN", g))
    t.call("SETPERMISSION", ro, permission="755", user=su)
    # Deleting a tree needs all access to each of its non-empty directories, checked before
    # whether the directory is empty.
    out["DELETE a tree holding another's directory"] = seen(t.call("DELETE", t.base))
    out["the same, recursive"] = seen(t.call("DELETE", t.base, recursive="true"))
    # The tester's own directory made read-only (as FsHandle.read_only_dir does).
    t.call("MKDIRS", mine)
    out["SETPERMISSION 0555 of one's own"] = seen(t.call("SETPERMISSION", mine, permission="555"))
    out["CREATE in one's own 0555"] = seen(
        t.call("CREATE", t.path("mine", "x"), follow=True, data=b"x")
    )
    out["the superuser may"] = seen(
        t.call("CREATE", t.path("mine", "x"), user=su, follow=True, data=b"x")
    )
    return out


def two_step_writes(t: Target) -> Record:
    f = t.path("f")
    out: Record = {}

    def step1(op: str, **params: str) -> str:
        res = t.call(op, f, **params)
        location = urlsplit(res.headers.get("Location", ""))
        query = parse_qs(location.query)
        out[f"{op} namenode step"] = (
            res.status_code,
            res.content,
            location.scheme,
            location.path == PREFIX + f,
            query.get("op"),
            query.get("user.name"),
            "namenoderpcaddress" in query,
        )
        return res.headers["Location"]

    location = step1("CREATE")
    out["nothing made yet"] = seen(t.call("GETFILESTATUS", f))
    res = t.session.put(location, data=b"hello", timeout=TIMEOUT)
    made = urlsplit(res.headers.get("Location", ""))
    out["CREATE datanode step"] = (seen(res), made.scheme, made.path == f)
    out["created"] = seen(t.call("OPEN", f, follow=True))
    step1("CREATE")  # an existing file: the namenode step does not look
    location = step1("APPEND")
    res = t.session.post(location, data=b"!", timeout=TIMEOUT)
    out["APPEND datanode step"] = (seen(res), res.headers.get("Location"))
    out["appended"] = seen(t.call("OPEN", f, follow=True))
    # requests follows a 307 itself, sending the body again.
    res = t.session.put(
        f"{t.url}{PREFIX}{t.path('g')}",
        params={"op": "CREATE", "user.name": CLUSTER_USER},
        data=b"auto",
        timeout=TIMEOUT,
    )
    out["CREATE, redirect followed by requests"] = (seen(res), len(res.history))
    out["its content"] = seen(t.call("OPEN", t.path("g"), follow=True))
    return out


def bad_requests(t: Target) -> Record:
    url = f"{t.url}{PREFIX}{t.base}"
    return {
        "no op": seen(t.session.get(url, timeout=TIMEOUT)),
        "unknown op": seen(t.session.get(url, params={"op": "NOSUCH"}, timeout=TIMEOUT)),
        "op of another method": seen(t.session.put(url, params={"op": "OPEN"}, timeout=TIMEOUT)),
        "home": t.call("GETHOMEDIRECTORY", "/").json(),
    }


SCENARIOS: list[Callable[[Target], Record]] = [
    create_on_an_existing_path,
    append_to_a_missing_file_or_a_directory,
    the_lease_of_an_upload_in_progress,
    a_client_gone_mid_upload,
    rename,
    delete,
    mkdirs,
    file_status_fields,
    truncate,
    open_,
    permissions,
    two_step_writes,
    bad_requests,
]


def run_scenario(
    scenario: Callable[[Target], Record],
    name: str,
    url: str,
    server: WebHdfsServer | None = None,
) -> Record:
    """Run ``scenario`` in a fresh directory of the server at ``url``, then remove it."""
    probe = requests.get(f"{url}{PREFIX}/", params={"op": "GETFILESTATUS"}, timeout=TIMEOUT)
    superuser = probe.json()["FileStatus"]["owner"]  # the root's owner
    base = f"/standin-agrees/{os.getpid()}-{next(_counter)}-{scenario.__name__}"
    target = Target(name, url, base, superuser, server)
    with target.session:
        made = target.call("MKDIRS", base)
        assert made.status_code == 200, (name, seen(made))
        try:
            return scenario(target)
        finally:
            target.call("DELETE", base, user=superuser, recursive="true")


@pytest.fixture(scope="module")
def sandbox_url(request: pytest.FixtureRequest) -> str:
    if os.environ.get("WEBHDFS_URL"):
        pytest.skip("WEBHDFS_URL names a cluster: the stand-in is compared with the sandbox only")
    sandbox: Sandbox = request.getfixturevalue("hdfs_sandbox")
    return sandbox.info.webhdfs.replace("webhdfs://", "http://").split(",")[0]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
def test_the_stand_in_answers_as_hadoop_does(
    scenario: Callable[[Target], Record], sandbox_url: str, webhdfs_server: WebHdfsServer
) -> None:
    hadoop = run_scenario(scenario, "hadoop", sandbox_url)
    stand_in = run_scenario(scenario, "stand-in", webhdfs_server.url, webhdfs_server)
    assert stand_in == hadoop
