"""Filesystem connection settings (pydantic v2, frozen) and URI parsing.

A filesystem is named by a URI: ``file:///`` or a bare path (local disk, the default),
``webhdfs://host:9870`` / ``swebhdfs://host:9871`` (also ``http://`` / ``https://``) for WebHDFS,
``hdfs://namenode:8020`` (or ``hdfs://nameservice`` of an HA cluster) for HDFS's own RPC
protocol. Several WebHDFS namenodes (HA) are
written ``webhdfs://nn1:9870,nn2:9870``. Credentials never stay in the URI: ``user:pass@`` is
split into :attr:`FileSystemSettings.user` and the secret :attr:`FileSystemSettings.password`.

Secrets (``password``, ``token``, ``keytab``) are ``SecretStr``: hidden in ``repr``, ``str`` and
dumps. Each can also be given by reference, ``password_env`` / ``token_env`` / ``keytab_env``
naming an environment variable read when the settings are validated, so that a value never has
to be written into a settings file or a Spark option.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, model_validator

from region.settings import Duration

__all__ = ["FileSystemSettings", "FsKind", "split_uri"]

FsKind = Literal["local", "webhdfs", "hdfs"]

_KINDS: dict[str, FsKind] = {
    "file": "local",
    "webhdfs": "webhdfs",
    "swebhdfs": "webhdfs",
    "http": "webhdfs",
    "https": "webhdfs",
    "hdfs": "hdfs",
}
_DEFAULT_PORTS = {"webhdfs": 9870, "http": 9870, "swebhdfs": 9871, "https": 9871, "hdfs": 8020}
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?://(?P<authority>[^/]*))?(?P<path>.*)$")
_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HOST_PORT = re.compile(r"^(\[[^\]]*\]|[^:\[\]]*)(?::(\d+))?$")


def _parse(value: str) -> tuple[str, str, str] | None:
    """``(scheme, authority, path)`` for a URI of a known scheme, ``None`` for a plain path."""
    match = _URI.match(value)
    if match is None or match.group("scheme").lower() not in _KINDS:
        if _HAS_SCHEME.match(value):
            scheme = value.split(":", 1)[0]
            known = ", ".join(sorted(_KINDS))
            raise ValueError(f"uri: unknown filesystem scheme {scheme!r} (known: {known})")
        return None  # a local path (a ':' is legal in a file name)
    scheme = match.group("scheme").lower()
    return scheme, match.group("authority") or "", unquote(match.group("path"))


def _strip_userinfo(authority: str) -> tuple[str, str | None, str | None]:
    """``(host part, user, password)`` of an authority ``user:pass@host:port``."""
    if "@" not in authority:
        return authority, None, None
    userinfo, hosts = authority.rsplit("@", 1)
    user, sep, password = userinfo.partition(":")
    return hosts, unquote(user) or None, unquote(password) if sep else None


def split_uri(uri_or_path: str) -> tuple[str, str]:
    """Split ``"webhdfs://nn:9870/landing"`` into ``("webhdfs://nn:9870", "/landing")``.

    A plain path or a ``file:`` URI gives ``("file:///", path)``; the path keeps its form (a
    relative path stays relative). Credentials in the authority stay in the first part: pass it to
    :class:`FileSystemSettings`, which moves them out of the URI.
    """
    parsed = _parse(uri_or_path)
    if parsed is None:
        return "file:///", uri_or_path
    scheme, authority, path = parsed
    if scheme == "file":
        return "file:///", path or "/"
    return f"{scheme}://{authority}", path or "/"


class FileSystemSettings(BaseModel):
    """How to reach a filesystem. The IBM Streams HDFS toolkit names are accepted as aliases."""

    # The raw input may hold a password (in the URI): errors must not echo it. Messages of our
    # own validators name the field and its value without the credentials instead.
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, hide_input_in_errors=True
    )

    #: The filesystem (the path part, if any, is not a root: paths are always absolute on it).
    uri: str = Field("file:///", validation_alias=AliasChoices("uri", "hdfsUri"))
    #: The user to act as (WebHDFS ``user.name``, HDFS simple auth). Default: the login name.
    user: str | None = Field(None, validation_alias=AliasChoices("user", "hdfsUser"))
    #: HTTP basic-auth password (e.g. a WebHDFS gateway); taken out of ``user:pass@`` URIs.
    password: SecretStr | None = None
    kerberos_principal: str | None = Field(
        None, validation_alias=AliasChoices("kerberos_principal", "authPrincipal")
    )
    #: Keytab file for ``kerberos_principal`` (its path is treated as a secret too).
    keytab: SecretStr | None = Field(None, validation_alias=AliasChoices("keytab", "authKeytab"))
    #: Hadoop delegation token (WebHDFS ``delegation`` parameter).
    token: SecretStr | None = None
    #: Names of environment variables holding the password, the token or the keytab path
    #: (read at validation; an explicit value wins).
    password_env: str | None = None
    token_env: str | None = None
    keytab_env: str | None = None
    #: Directory with ``core-site.xml`` / ``hdfs-site.xml`` for ``hdfs://`` (name services of HA
    #: clusters, client settings). Default: ``HADOOP_CONF_DIR``.
    config_dir: str | None = Field(
        None, validation_alias=AliasChoices("config_dir", "configPath", "hadoop_conf_dir")
    )
    #: The cluster's WebHDFS (``webhdfs://nn:9870``), through which ``hdfs://`` truncates.
    #: Default: ``dfs.namenode.http-address`` of the Hadoop configuration; none known means no
    #: truncate (the sink then publishes by rename).
    webhdfs_uri: str | None = None
    #: Timeout of one request to the filesystem.
    timeout: Duration = Field(30.0, gt=0)
    #: How long append / truncate / overwrite wait while another writer's lease is held or a
    #: dead writer's lease is being recovered, before failing with ``BlockingIOError``.
    lease_recovery_timeout: Duration = Field(
        90.0, validation_alias=AliasChoices("lease_recovery_timeout", "leaseRecoveryTimeout")
    )
    #: How long an operation waits while the NameNode is in safe mode (it was just restarted
    #: and is waiting for its DataNodes' block reports), before failing.
    safe_mode_timeout: Duration = Field(
        120.0, validation_alias=AliasChoices("safe_mode_timeout", "safeModeTimeout")
    )
    #: Retries after a connection failure (each logged), then ``ConnectionError``.
    retries: int = Field(3, ge=0, validation_alias=AliasChoices("retries", "reconnectionBound"))
    #: Delay before the first retry; doubled for each further retry.
    retry_backoff: Duration = Field(
        0.5, validation_alias=AliasChoices("retry_backoff", "retryBackoff", "reconnectionInterval")
    )

    @model_validator(mode="before")
    @classmethod
    def _secrets_from_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for field, aliases in (
            ("password", ("password",)),
            ("token", ("token",)),
            ("keytab", ("keytab", "authKeytab")),
        ):
            name = data.get(f"{field}_env")
            if name is None or any(data.get(a) is not None for a in aliases):
                continue
            if not isinstance(name, str) or not name:
                raise ValueError(f"{field}_env: {name!r} is not an environment variable name")
            value = os.environ.get(name)
            if not value:
                msg = f"{field}_env: the environment variable {name!r} is not set (or is empty)"
                raise ValueError(msg)
            data = {**data, field: value}
        return data

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_uri(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        key = next((k for k in ("uri", "hdfsUri") if k in data), None)
        if key is None or not isinstance(data[key], str):
            return data
        parsed = _parse(data[key].strip())
        if parsed is None:
            return {**data, key: data[key].strip()}
        scheme, authority, path = parsed
        hosts, user, password = _strip_userinfo(authority)
        data = {**data, key: f"{scheme}://{hosts}{path}"}
        if user is not None:
            explicit = data.get("user", data.get("hdfsUser"))
            if explicit is not None and explicit != user:
                # The message must not echo the URI: it may carry a password.
                msg = f"user: {explicit!r} differs from the user {user!r} named in the uri"
                raise ValueError(msg)
            data["user"] = user
        if password is not None:
            data["password"] = password
        return data

    @model_validator(mode="after")
    def _check_uri(self) -> FileSystemSettings:
        parsed = _parse(self.uri)
        if parsed is not None and parsed[0] != "file" and not parsed[1]:
            raise ValueError(f"uri: {self.uri!r} names no host (e.g. 'webhdfs://namenode:9870')")
        self.hosts()  # a bad host:port fails here, at configuration time
        if self.keytab is not None and self.kerberos_principal is None:
            # The path is a secret: never in a message.
            raise ValueError("keytab: '***' is set but kerberos_principal is not")
        return self

    @property
    def kind(self) -> FsKind:
        parsed = _parse(self.uri)
        return "local" if parsed is None else _KINDS[parsed[0]]

    @property
    def scheme(self) -> str:
        parsed = _parse(self.uri)
        return "file" if parsed is None else parsed[0]

    def hosts(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each namenode named in the URI, default ports filled in."""
        parsed = _parse(self.uri)
        if parsed is None or parsed[0] == "file":
            return []
        out: list[tuple[str, int]] = []
        for item in parsed[1].split(","):
            match = _HOST_PORT.match(item.strip())
            if match is None or not match.group(1):
                raise ValueError(f"uri: {self.uri!r} has a bad host:port {item.strip()!r}")
            port = match.group(2)
            out.append(
                (match.group(1).strip("[]"), int(port) if port else _DEFAULT_PORTS[parsed[0]])
            )
        return out

    def authority(self) -> str:
        """``host:port[,host:port]`` without credentials."""
        return ",".join(f"{h}:{p}" for h, p in self.hosts())

    def display(self, path: str = "") -> str:
        """The filesystem (and ``path`` on it) as a URI for messages: never with credentials."""
        if self.kind == "local":
            return "file://" + path if path.startswith("/") else "file:///" + path
        if path and not path.startswith("/"):
            path = "/" + path
        parsed = _parse(self.uri)
        if parsed is not None and parsed[0] == "hdfs" and ":" not in parsed[1]:
            # A name service (HA): resolved from the Hadoop configuration, it has no port.
            return f"hdfs://{_strip_userinfo(parsed[1])[0]}{path}"
        return f"{self.scheme}://{self.authority()}{path}"
