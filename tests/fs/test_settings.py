"""Filesystem settings, URI splitting and opening a configured path."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from operators.fs import (
    FileSystemSettings,
    LocalFileSystem,
    WebHdfsFileSystem,
    open_filesystem,
    open_path,
    split_uri,
)


def test_defaults_are_the_local_disk() -> None:
    settings = FileSystemSettings()
    assert settings.kind == "local"
    assert settings.lease_recovery_timeout == 90.0
    assert isinstance(open_filesystem(None), LocalFileSystem)
    assert isinstance(open_filesystem("/data"), LocalFileSystem)


def test_ibm_names_and_durations() -> None:
    settings = FileSystemSettings.model_validate(
        {
            "hdfsUri": "webhdfs://nn:9870",
            "hdfsUser": "etl",
            "authPrincipal": "etl@EXAMPLE.COM",
            "authKeytab": "/etc/etl.keytab",
            "timeout": "250ms",
            "leaseRecoveryTimeout": "2m",
            "reconnectionBound": 5,
            "reconnectionInterval": "100ms",
        }
    )
    assert settings.uri == "webhdfs://nn:9870"
    assert settings.user == "etl"
    assert settings.kerberos_principal == "etl@EXAMPLE.COM"
    assert settings.keytab is not None
    assert settings.keytab.get_secret_value() == "/etc/etl.keytab"
    assert settings.timeout == 0.25
    assert settings.lease_recovery_timeout == 120.0
    assert (settings.retries, settings.retry_backoff) == (5, 0.1)
    with pytest.raises(ValidationError):
        settings.user = "other"  # type: ignore[misc]


def test_a_password_in_the_uri_is_kept_secret() -> None:
    settings = FileSystemSettings(uri="webhdfs://bob:hunter2@nn1:9870,nn2/x")
    assert settings.user == "bob"
    assert settings.password is not None
    assert settings.password.get_secret_value() == "hunter2"
    assert settings.hosts() == [("nn1", 9870), ("nn2", 9870)]
    for text in (settings.uri, repr(settings), str(settings), settings.display("/a")):
        assert "hunter2" not in text
    assert settings.display("/a") == "webhdfs://nn1:9870,nn2:9870/a"


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"uri": "ftp://h/x"}, ["uri", "ftp"]),
        ({"uri": "webhdfs://"}, ["uri", "webhdfs://"]),
        ({"uri": "webhdfs://nn:port"}, ["uri", "nn:port"]),
        ({"timeout": "soon"}, ["timeout", "soon"]),
        ({"keytab": "/k"}, ["keytab", "'***'", "kerberos_principal"]),
        ({"uri": "webhdfs://a:s3cret@h", "user": "b"}, ["user", "'b'"]),
        ({"hdfs_uri": "x"}, ["hdfs_uri"]),
    ],
)
def test_errors_name_the_field_and_value(values: dict[str, str], names: list[str]) -> None:
    with pytest.raises(ValidationError) as info:
        FileSystemSettings.model_validate(values)
    for name in names:
        assert name in str(info.value)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/tmp/x", ("file:///", "/tmp/x")),
        ("rel/x", ("file:///", "rel/x")),
        ("a:b", ("file:///", "a:b")),
        ("file:///tmp/x", ("file:///", "/tmp/x")),
        ("file:/tmp/x", ("file:///", "/tmp/x")),
        ("webhdfs://nn:9870/landing/in", ("webhdfs://nn:9870", "/landing/in")),
        ("webhdfs://nn:9870", ("webhdfs://nn:9870", "/")),
        ("hdfs://nameservice1/a%20b", ("hdfs://nameservice1", "/a b")),
    ],
)
def test_a_uri_splits_into_its_filesystem_and_path(given: str, expected: tuple[str, str]) -> None:
    assert split_uri(given) == expected


def test_open_path_on_the_configured_filesystem() -> None:
    base = FileSystemSettings(uri="webhdfs://nn:9870", user="etl", token="tok-1")
    fs, path = open_path("/landing", base)
    assert isinstance(fs, WebHdfsFileSystem)
    assert path == "/landing"
    assert fs.settings.token is not None
    fs, path = open_path("/tmp/x")
    assert isinstance(fs, LocalFileSystem)
    assert path == "/tmp/x"
    fs, path = open_path("file:///tmp/y", base)
    assert isinstance(fs, LocalFileSystem)
    assert path == "/tmp/y"


def test_open_path_keeps_secrets_for_their_own_filesystem() -> None:
    base = FileSystemSettings(uri="webhdfs://nn:9870", user="etl", token="tok-1", timeout="3s")
    fs, path = open_path("webhdfs://nn:9870/in", base)
    assert isinstance(fs, WebHdfsFileSystem)
    assert fs.settings.token is not None
    fs, path = open_path("webhdfs://elsewhere:9870/out", base)
    assert isinstance(fs, WebHdfsFileSystem)
    assert path == "/out"
    assert fs.settings.token is None  # not sent to another cluster
    assert fs.settings.user == "etl"
    assert fs.settings.timeout == 3.0


def test_hdfs_with_no_namenode_listening_names_the_uri() -> None:
    settings = FileSystemSettings(uri="hdfs://127.0.0.1:1", retries=0)
    with pytest.raises(OSError) as info:
        open_filesystem(settings)
    assert "hdfs://127.0.0.1:1" in str(info.value)


def test_kerberos_without_requests_gssapi_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if the kerberos extra were not installed (the test extra installs it).
    monkeypatch.setitem(sys.modules, "requests_gssapi", None)
    with pytest.raises(ImportError) as info:
        open_filesystem(FileSystemSettings(uri="webhdfs://nn:9870", kerberos_principal="etl@R"))
    assert "requests-gssapi" in str(info.value)
    assert "webhdfs://nn:9870" in str(info.value)
