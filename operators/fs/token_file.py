"""A delegation token where ``hdfs-native`` reads it: a Hadoop token storage file.

``hdfs-native`` takes no token in its API. At every connection it reads the file named by
``HADOOP_TOKEN_FILE_LOCATION`` and offers the NameNode an ``HDFS_DELEGATION_TOKEN`` whose
service is the address it connects to (``host:port``, or ``ha-hdfs:<name service>``), passing
over one within :data:`MARGIN` seconds of its maximum date. The token a Kerberos login got
through WebHDFS (GETDELEGATIONTOKEN: kind ``SWEBHDFS delegation``, service its HTTP address) is
the same HDFS delegation token under another label: written here with the RPC kind and service,
the NameNode checks its identifier and password as for any.

One file per process (the variable is the process's): :func:`use_token` writes it, private to
this user, and points the variable at it; :func:`replace_tokens` swaps every token in it for a
new one (the process that replaced the job's token).
"""

from __future__ import annotations

import base64
import io
import os
import tempfile
import threading

__all__ = ["MARGIN", "TOKEN_FILE_ENV", "max_date", "replace_tokens", "use_token"]

TOKEN_FILE_ENV = "HADOOP_TOKEN_FILE_LOCATION"
#: hdfs-native passes over a token this close (seconds) to its maximum date.
MARGIN = 60.0
_KIND = b"HDFS_DELEGATION_TOKEN"
_MAGIC = b"HDTS"

_lock = threading.Lock()
#: service -> token (URL string) of this process's file.
_tokens: dict[str, str] = {}
_path: str | None = None


def _read_vlong(buf: io.BytesIO) -> int:
    """Hadoop's ``WritableUtils.readVLong``."""
    first = int.from_bytes(buf.read(1), "big", signed=True)
    if first >= -112:
        return first
    length = -119 - first if first < -120 else -111 - first
    value = int.from_bytes(buf.read(length - 1), "big")
    return ~value if first < -120 or -112 <= first < 0 else value


def _write_vlong(out: io.BytesIO, value: int) -> None:
    """Hadoop's ``WritableUtils.writeVLong`` (the lengths here are small and non-negative)."""
    if -112 <= value <= 127:
        out.write(value.to_bytes(1, "big", signed=True))
        return
    length = (value.bit_length() + 7) // 8
    out.write((-112 - length).to_bytes(1, "big", signed=True))
    out.write(value.to_bytes(length, "big"))


def _read_bytes(buf: io.BytesIO) -> bytes:
    return buf.read(_read_vlong(buf))


def _write_bytes(out: io.BytesIO, data: bytes) -> None:
    _write_vlong(out, len(data))
    out.write(data)


def _decode(token: str) -> tuple[bytes, bytes]:
    """``(identifier, password)`` of a token's URL string (``Token.encodeToUrlString``)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        buf = io.BytesIO(raw)
        identifier, password = _read_bytes(buf), _read_bytes(buf)
    except (ValueError, IndexError):
        raise ValueError("token: not a Hadoop delegation token") from None
    if not identifier or not password:
        raise ValueError("token: not a Hadoop delegation token")
    return identifier, password


def max_date(token: str) -> float:
    """The token's maximum date (epoch seconds): past it the NameNode refuses it, renewed or
    not. Read from its identifier (``AbstractDelegationTokenIdentifier``: version, owner,
    renewer, real user, issue date, maximum date)."""
    buf = io.BytesIO(_decode(token)[0])
    buf.read(1)  # version
    for _ in range(3):
        _read_bytes(buf)
    _read_vlong(buf)  # issue date
    return _read_vlong(buf) / 1000.0


def _storage(tokens: dict[str, str]) -> bytes:
    """Hadoop's token storage file (``Credentials.writeTokenStorageToStream``, the Writable
    format, version 0): each token under its service as alias, then no secret keys."""
    out = io.BytesIO()
    out.write(_MAGIC + b"\x00")
    _write_vlong(out, len(tokens))
    for service, token in sorted(tokens.items()):
        identifier, password = _decode(token)
        _write_bytes(out, service.encode())
        _write_bytes(out, identifier)
        _write_bytes(out, password)
        _write_bytes(out, _KIND)
        _write_bytes(out, service.encode())
    _write_vlong(out, 0)
    return out.getvalue()


def _write() -> None:
    global _path
    if _path is None:
        _path = os.path.join(tempfile.mkdtemp(prefix="hdfs-region-tokens-"), "tokens")
    temp = f"{_path}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(_storage(_tokens))
    os.replace(temp, _path)
    os.environ[TOKEN_FILE_ENV] = _path


def use_token(services: list[str], token: str) -> None:
    """Make ``token`` the one hdfs-native offers the NameNodes known as ``services``."""
    _decode(token)  # a bad token fails here, not at the first connection
    with _lock:
        if all(_tokens.get(s) == token for s in services) and _path is not None:
            return
        _tokens.update(dict.fromkeys(services, token))
        _write()


def replace_tokens(token: str) -> None:
    """Put ``token`` in place of every token of this process's file (none: nothing to do)."""
    _decode(token)
    with _lock:
        if not _tokens:
            return
        for service in _tokens:
            _tokens[service] = token
        _write()
