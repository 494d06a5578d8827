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

Where the settings come from, in this order:

1. ``credentials`` (a JSON string) or ``cred_file`` (a JSON file), IBM's format: ``user`` /
   ``hdfsUser``, ``password`` / ``hdfsPassword``, ``webhdfs`` / ``hdfsUri``. They fill in those
   settings and are not kept; a setting given both ways is refused.
2. ``*_env`` references, then ``user:pass@`` in the URI (moved out of it).
3. A WebHDFS gateway (Apache Knox) path in the URI, ``https://knox:8443/gateway/default/webhdfs/v1``,
   becomes :attr:`FileSystemSettings.gateway_path`.
4. No ``uri`` at all: ``fs.defaultFS`` of ``core-site.xml`` in ``config_dir`` (else
   ``HADOOP_CONF_DIR``) when it names one, as IBM's operators and Hadoop's own client do; logged
   at INFO with the file it came from, which :attr:`FileSystemSettings.uri_source` names too.
   Otherwise the local disk.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from region.settings import Duration

from .hadoop_conf import default_fs

__all__ = [
    "MAX_RETRY_DELAY",
    "WEBHDFS_PREFIX",
    "FileSystemSettings",
    "FsKind",
    "ReconnectionPolicy",
    "split_uri",
]

logger = logging.getLogger(__name__)

FsKind = Literal["local", "webhdfs", "hdfs"]
#: IBM's ``reconnectionPolicy``: how often a failed connection is tried again.
ReconnectionPolicy = Literal["NoRetry", "BoundedRetry", "InfiniteRetry"]
#: The REST path of WebHDFS; a gateway (Apache Knox) puts its own path in front of it.
WEBHDFS_PREFIX = "/webhdfs/v1"
#: The longest pause between two connection attempts (the delay doubles up to it).
MAX_RETRY_DELAY = 60.0
_WEBHDFS_SCHEMES = frozenset({"webhdfs", "swebhdfs", "http", "https"})
#: The keys of IBM's ``credentials`` JSON and the settings they fill in.
_CREDENTIAL_KEYS = {
    "user": "user",
    "hdfsUser": "user",
    "password": "password",
    "hdfsPassword": "password",
    "webhdfs": "uri",
    "hdfsUri": "uri",
}
#: Every name a setting may be given by (before validation, aliases are not yet merged).
_NAMES = {
    "uri": ("uri", "hdfsUri"),
    "user": ("user", "hdfsUser"),
    "password": ("password", "hdfsPassword"),
    "config_dir": ("config_dir", "configPath", "hadoop_conf_dir"),
    "credentials": ("credentials",),
    "cred_file": ("cred_file", "credFile"),
    "gateway_path": ("gateway_path", "gatewayPath"),
}
_announced: set[tuple[str, str]] = set()
_announced_lock = threading.Lock()

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
    # Escapes that are not UTF-8 (``caf%E9``) name a local file's own bytes, as os.fsdecode.
    path = unquote(match.group("path"), errors="surrogateescape")
    return scheme, match.group("authority") or "", path


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
        host = authority.lower()
        if host not in ("", "localhost"):
            # Hadoop refuses it too ("Wrong FS"); taking the path alone would read another place.
            msg = (
                f"{uri_or_path!r} names the host {authority!r}, and the local disk has none: "
                f"write 'file:///' and an absolute path, or a relative path without 'file:'"
            )
            raise ValueError(msg)
        return "file:///", path or "/"
    gateway, path = _split_gateway(scheme, path)
    return f"{scheme}://{authority}{gateway}", path or "/"


def _split_gateway(scheme: str, path: str) -> tuple[str, str]:
    """``(gateway path, rest)`` of a WebHDFS URI's path: a path with a ``/webhdfs/v1`` segment
    (``/gateway/default/webhdfs/v1/landing``) names the REST base up to it; else ``("", path)``."""
    if scheme not in _WEBHDFS_SCHEMES:
        return "", path
    at = (path + "/").find(WEBHDFS_PREFIX + "/")
    if at < 0:
        return "", path
    end = at + len(WEBHDFS_PREFIX)
    return path[:end], path[end:]


def _given(data: dict[str, Any], field: str) -> str | None:
    """The key under which ``field`` is given (by its name or an alias), if it is."""
    return next((k for k in _NAMES[field] if data.get(k) is not None), None)


def _credentials(data: dict[str, Any]) -> dict[str, Any]:
    """Fill in user, password and uri from IBM's ``credentials`` JSON or ``cred_file``."""
    text_key, file_key = _given(data, "credentials"), _given(data, "cred_file")
    raw_text, raw_file = data.get(text_key or ""), data.get(file_key or "")
    drop = (*_NAMES["credentials"], *_NAMES["cred_file"])
    data = {k: v for k, v in data.items() if k not in drop}
    if text_key is None and file_key is None:
        return data
    if text_key is not None and file_key is not None:
        raise ValueError(f"{text_key}: set together with {file_key}: give one of them")
    if file_key is not None:
        # A path, not a secret: it is named in messages (what is in the file never is).
        where = f"{file_key}: {raw_file!r}"
        try:
            with open(os.path.expanduser(str(raw_file)), encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise ValueError(f"{where} cannot be read ({err.strerror or err})") from None
    else:
        where = f"{text_key}"
        text = raw_text.get_secret_value() if isinstance(raw_text, SecretStr) else str(raw_text)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as err:
        # The position only: the text holds a password.
        raise ValueError(f"{where} is not JSON (line {err.lineno} column {err.colno})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{where} is not a JSON object with user, password and webhdfs")
    unknown = sorted(set(parsed) - set(_CREDENTIAL_KEYS))
    if unknown:
        known = ", ".join(_CREDENTIAL_KEYS)
        raise ValueError(f"{where} has unknown keys {unknown} (known: {known})")
    out = dict(data)
    for key, value in parsed.items():
        field = _CREDENTIAL_KEYS[key]
        if value is None or (isinstance(value, str) and not value.strip()):
            continue  # IBM skips empty values the same way
        if not isinstance(value, str):
            raise ValueError(f"{where}: {key} must be a string")
        explicit = _given(data, field)
        if explicit is not None:
            raise ValueError(f"{where} sets {key}, and {explicit} is given too: keep one")
        if _given(out, field) is not None:
            raise ValueError(f"{where} sets {field} twice: keep one of its keys")
        out[field] = value.strip() if field != "password" else value
    return out


def _announce_default(uri: str, origin: str) -> None:
    """Log (once per process) that the filesystem came from the Hadoop configuration."""
    with _announced_lock:
        if (uri, origin) in _announced:
            return
        _announced.add((uri, origin))
    logger.info("No uri given: plain paths are on %s, %s", uri, origin)


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
    #: HTTP basic-auth password (a WebHDFS gateway such as Apache Knox); taken out of
    #: ``user:pass@`` URIs.
    password: SecretStr | None = Field(
        None, validation_alias=AliasChoices("password", "hdfsPassword")
    )
    #: IBM's connection JSON, ``{"user": ..., "password": ..., "webhdfs": ...}``: read into
    #: ``user``, ``password`` and ``uri`` when validated, never kept.
    credentials: SecretStr | None = Field(None, exclude=True)
    #: A file holding that JSON (IBM's ``credFile``); read when validated, never kept.
    cred_file: str | None = Field(
        None, validation_alias=AliasChoices("cred_file", "credFile"), exclude=True
    )
    #: Kerberos principal to log in as (with `keytab` or `keytab_env`, or a ticket cache).
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
    #: Name of an environment variable holding a delegation token to use instead of a login.
    token_env: str | None = None
    #: Name of an environment variable holding the keytab's path (kept out of the file).
    keytab_env: str | None = None
    #: Name of an environment variable holding the PKCS12 trust store's password.
    key_store_password_env: str | None = None
    #: Directory with ``core-site.xml`` / ``hdfs-site.xml``: ``fs.defaultFS`` when no ``uri`` is
    #: given, name services of HA clusters and client settings for ``hdfs://``. Default:
    #: ``HADOOP_CONF_DIR``.
    config_dir: str | None = Field(
        None, validation_alias=AliasChoices("config_dir", "configPath", "hadoop_conf_dir")
    )
    #: The REST base path of WebHDFS: ``/webhdfs/v1``, or a gateway's, e.g. Apache Knox's
    #: ``/gateway/default/webhdfs/v1`` (also taken from the URI). Must end in ``/webhdfs/v1``.
    gateway_path: str = Field(
        WEBHDFS_PREFIX, validation_alias=AliasChoices("gateway_path", "gatewayPath")
    )
    #: The CA certificates trusted for ``swebhdfs://`` / ``https://`` instead of the system's: a
    #: PEM file, or a PKCS12 store (needs the ``cryptography`` package). IBM's ``keyStorePath``.
    #: The server's certificate is always verified.
    ca_bundle: str | None = Field(
        None, validation_alias=AliasChoices("ca_bundle", "keyStorePath", "key_store_path")
    )
    #: The password of a PKCS12 ``ca_bundle`` (IBM's ``keyStorePassword``).
    key_store_password: SecretStr | None = Field(
        None, validation_alias=AliasChoices("key_store_password", "keyStorePassword")
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
    #: After a connection failure: ``NoRetry`` fails at once, ``BoundedRetry`` tries again
    #: ``retries`` times, ``InfiniteRetry`` until it connects or the job is stopped. Every
    #: retry is logged (WARNING) with its count and the URI.
    reconnection_policy: ReconnectionPolicy = Field(
        "BoundedRetry", validation_alias=AliasChoices("reconnection_policy", "reconnectionPolicy")
    )
    #: Retries after a connection failure (``BoundedRetry``), then ``ConnectionError``.
    retries: int = Field(3, ge=0, validation_alias=AliasChoices("retries", "reconnectionBound"))
    #: Delay before the first retry; doubled for each further retry, up to 60 s.
    retry_backoff: Duration = Field(
        0.5,
        ge=0,
        validation_alias=AliasChoices("retry_backoff", "retryBackoff", "reconnectionInterval"),
    )

    #: Where ``uri`` came from when it was not given (see :attr:`uri_source`).
    _uri_source: str | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _gather(cls, data: Any, handler: ModelWrapValidatorHandler[FileSystemSettings]) -> Any:
        # One validator, so the steps run in this order (see the module doc).
        if not isinstance(data, dict):
            return handler(data)
        data = _credentials(data)
        data = cls._secrets_from_environment(data)
        data = cls._credentials_out_of_uri(data)
        data, source = cls._default_uri(data)
        settings = handler(data)
        settings._uri_source = source
        return settings

    @property
    def uri_source(self) -> str | None:
        """Where :attr:`uri` came from when none was given: ``"fs.defaultFS of
        /etc/hadoop/conf/core-site.xml in HADOOP_CONF_DIR"``; ``None`` when it was given (or is
        the local disk by default)."""
        return self._uri_source

    @classmethod
    def _secrets_from_environment(cls, data: dict[str, Any]) -> dict[str, Any]:
        for field, aliases in (
            ("password", ("password", "hdfsPassword")),
            ("token", ("token",)),
            ("keytab", ("keytab", "authKeytab")),
            ("key_store_password", ("key_store_password", "keyStorePassword")),
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

    @classmethod
    def _credentials_out_of_uri(cls, data: dict[str, Any]) -> dict[str, Any]:
        key = _given(data, "uri")
        if key is None or not isinstance(data[key], str):
            return data
        parsed = _parse(data[key].strip())
        if parsed is None:
            return {**data, key: data[key].strip()}
        scheme, authority, path = parsed
        hosts, user, password = _strip_userinfo(authority)
        gateway, path = _split_gateway(scheme, path)
        data = {**data, key: f"{scheme}://{hosts}{path}"}
        if gateway:
            named = _given(data, "gateway_path")
            if named is not None and str(data[named]).rstrip("/") != gateway:
                msg = f"{named}: {data[named]!r} differs from the gateway {gateway!r} of the uri"
                raise ValueError(msg)
            data["gateway_path"] = gateway
        if user is not None:
            explicit_key = _given(data, "user")
            explicit = data[explicit_key] if explicit_key is not None else None
            if explicit is not None and explicit != user:
                # The message must not echo the URI: it may carry a password.
                msg = f"user: {explicit!r} differs from the user {user!r} named in the uri"
                raise ValueError(msg)
            data["user"] = user
        if password is not None:
            data["password"] = password
        return data

    @classmethod
    def _default_uri(cls, data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """No uri: ``fs.defaultFS`` of the Hadoop configuration, when it names one; with where
        it came from (``None``: nothing was taken)."""
        if _given(data, "uri") is not None:
            return data, None
        key = _given(data, "config_dir")
        explicit = data.get(key) if key is not None else None
        directory = explicit or os.environ.get("HADOOP_CONF_DIR")
        if not directory:
            return data, None
        name = key or "HADOOP_CONF_DIR"
        if not isinstance(directory, str) or not os.path.isdir(directory):
            if explicit is None:
                return data, None  # an unset-up HADOOP_CONF_DIR: Hadoop's client ignores it too
            raise ValueError(f"{name}: {directory!r} is not a directory")
        found = default_fs(directory)
        if found is None:
            return data, None
        uri, source = found
        try:
            parsed = _parse(uri)
        except ValueError:
            parsed = ("", "", "")  # a scheme this does not read: refused below
        if parsed is None or parsed[0] == "file":
            return data, None
        if parsed[0] != "hdfs" and parsed[0] not in _WEBHDFS_SCHEMES:
            raise ValueError(
                f"{name}: fs.defaultFS {uri!r} of {source} is not a filesystem this reads "
                "(hdfs://, webhdfs://, swebhdfs://): set uri"
            )
        origin = f"fs.defaultFS of {source} in {name}"
        _announce_default(uri, origin)
        return {**data, "uri": uri}, origin

    @field_validator("gateway_path")
    @classmethod
    def _webhdfs_tail(cls, value: str) -> str:
        value = "/" + value.strip().strip("/")
        if not (value + "/").endswith(WEBHDFS_PREFIX + "/"):
            msg = f"gateway_path: {value!r} does not end in {WEBHDFS_PREFIX!r} (e.g. Knox's "
            raise ValueError(msg + "'/gateway/default/webhdfs/v1')")
        return value

    @model_validator(mode="after")
    def _check_uri(self) -> FileSystemSettings:
        parsed = _parse(self.uri)
        if parsed is not None and parsed[0] != "file" and not parsed[1]:
            raise ValueError(f"uri: {self.uri!r} names no host (e.g. 'webhdfs://namenode:9870')")
        self.hosts()  # a bad host:port fails here, at configuration time
        if self.keytab is not None and self.kerberos_principal is None:
            # The path is a secret: never in a message.
            raise ValueError("keytab: '***' is set but kerberos_principal is not")
        if self.gateway_path != WEBHDFS_PREFIX and self.kind != "webhdfs":
            raise ValueError(f"gateway_path: set, but {self.display()!r} is not WebHDFS")
        explicit_retries = "retries" in self.model_fields_set and self.retries > 0
        if self.reconnection_policy == "NoRetry" and explicit_retries:
            msg = f"retries: {self.retries} contradicts reconnection_policy = 'NoRetry'"
            raise ValueError(msg)
        if self.ca_bundle is not None:
            from .tls import check_trust_store

            password = self.key_store_password
            check_trust_store(self.ca_bundle, password.get_secret_value() if password else None)
        return self

    @property
    def max_retries(self) -> int | None:
        """Retries after a connection failure; ``None``: without end (``InfiniteRetry``)."""
        if self.reconnection_policy == "InfiniteRetry":
            return None
        return 0 if self.reconnection_policy == "NoRetry" else self.retries

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
        gateway = "" if self.gateway_path == WEBHDFS_PREFIX else self.gateway_path
        return f"{self.scheme}://{self.authority()}{gateway}{path}"
