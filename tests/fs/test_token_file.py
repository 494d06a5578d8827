"""A delegation token where hdfs-native reads it: Hadoop's token storage file, the token
relabelled for HDFS RPC, private to the user, replaced in place."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from operators.fs import token_file


def _vint(value: int) -> bytes:
    """Hadoop's WritableUtils.writeVLong, written out here rather than taken from the module."""
    if -112 <= value <= 127:
        return value.to_bytes(1, "big", signed=True)
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return (-112 - len(raw)).to_bytes(1, "big", signed=True) + raw


def _text(data: bytes) -> bytes:
    return _vint(len(data)) + data


def _token(max_ms: int, password: bytes = b"secret") -> str:
    """A URL string of a token as WebHDFS hands it out (kind SWEBHDFS, its HTTP address)."""
    identifier = (
        b"\x00"
        + _text(b"tester")
        + _text(b"hdfs")
        + _text(b"")
        + _vint(max_ms - 90_000)
        + _vint(max_ms)
        + _vint(7)
        + _vint(2)
    )
    raw = (
        _text(identifier) + _text(password) + _text(b"SWEBHDFS delegation") + _text(b"1.2.3.4:9871")
    )
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _entries(path: Path) -> list[tuple[str, bytes, bytes, str]]:
    """``(alias, identifier, password + kind, service)`` as hdfs-native reads the file."""
    data = path.read_bytes()
    assert data[:5] == b"HDTS\x00"
    pos = 5

    def vint() -> int:
        nonlocal pos
        first = int.from_bytes(data[pos : pos + 1], "big", signed=True)
        pos += 1
        if first >= -112:
            return first
        size = -111 - first
        value = int.from_bytes(data[pos : pos + size - 1], "big")
        pos += size - 1
        return value

    def field() -> bytes:
        nonlocal pos
        size = vint()
        pos += size
        return data[pos - size : pos]

    out = []
    for _ in range(vint()):
        alias, identifier, password, kind, service = (field() for _ in range(5))
        assert kind == b"HDFS_DELEGATION_TOKEN"
        out.append((alias.decode(), identifier, password, service.decode()))
    assert vint() == 0  # no secret keys
    return out


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process without a token file yet (the variable restored afterwards)."""
    monkeypatch.setenv(token_file.TOKEN_FILE_ENV, "unset")
    monkeypatch.setattr(token_file, "_tokens", {})
    monkeypatch.setattr(token_file, "_path", None)


def test_a_token_becomes_a_private_file_hdfs_native_reads_and_is_replaced_in_place(
    fresh: None,
) -> None:
    first, second = _token(1_800_000_000_000), _token(1_800_000_060_000, b"other")
    assert token_file.max_date(first) == 1_800_000_000.0
    token_file.use_token(["127.0.0.1:8020"], first)
    path = Path(os.environ[token_file.TOKEN_FILE_ENV])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ((alias, identifier, password, service),) = _entries(path)
    assert (alias, service, password) == ("127.0.0.1:8020", "127.0.0.1:8020", b"secret")
    assert identifier.startswith(b"\x00\x06tester")
    token_file.replace_tokens(second)
    assert Path(os.environ[token_file.TOKEN_FILE_ENV]) == path
    ((_, _, password, _),) = _entries(path)
    assert password == b"other"


def test_a_string_that_is_no_token_is_refused_before_anything_is_written(fresh: None) -> None:
    with pytest.raises(ValueError, match="not a Hadoop delegation token"):
        token_file.use_token(["127.0.0.1:8020"], "not-a-token")
    assert os.environ[token_file.TOKEN_FILE_ENV] == "unset"
