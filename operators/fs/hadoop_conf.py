"""Hadoop client configuration (``core-site.xml``, ``hdfs-site.xml``) as far as we use it: the
default filesystem (``fs.defaultFS``) and the NameNodes' HTTP addresses.

The directory is ``config_dir`` when given, else ``HADOOP_CONF_DIR``, as for Hadoop's own client.
Only the standard library: the settings read it while they are validated.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

__all__ = ["conf_dir", "default_fs", "hadoop_http_addresses", "hadoop_properties", "https_only"]

_FILES = ("core-site.xml", "hdfs-site.xml")
#: ``(path, mtime_ns, size)`` -> properties: settings are validated often, the files change rarely.
_cache: dict[tuple[str, int, int], dict[str, str]] = {}


def conf_dir(explicit: str | None) -> str | None:
    """``explicit``, else ``HADOOP_CONF_DIR`` (``None`` when neither is set)."""
    return explicit or os.environ.get("HADOOP_CONF_DIR") or None


def _read(path: str) -> dict[str, str]:
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise ValueError(f"{path}: not a Hadoop configuration file ({err})") from None
    out: dict[str, str] = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            out[name.strip()] = value.strip()
    _cache[key] = out
    return out


def hadoop_properties(directory: str | None) -> dict[str, str]:
    """The properties of ``core-site.xml`` and ``hdfs-site.xml`` in ``directory``."""
    out: dict[str, str] = {}
    if not directory:
        return out
    for name in _FILES:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            out.update(_read(path))
    return out


def default_fs(directory: str) -> tuple[str, str] | None:
    """``(fs.defaultFS, the core-site.xml it is written in)``, or ``None`` when the directory
    names none. The deprecated ``fs.default.name`` counts too, as in Hadoop."""
    path = os.path.join(directory, "core-site.xml")
    if not os.path.exists(path):
        return None
    props = _read(path)
    value = props.get("fs.defaultFS") or props.get("fs.default.name")
    return (value, path) if value else None


def https_only(directory: str | None) -> bool:
    """Whether the cluster serves WebHDFS over HTTPS only (``dfs.http.policy``)."""
    return hadoop_properties(directory).get("dfs.http.policy", "").upper() == "HTTPS_ONLY"


def hadoop_http_addresses(authority: str, directory: str | None) -> list[str]:
    """The NameNodes' HTTP ``host:port`` for an ``hdfs://`` authority, from the Hadoop
    configuration: ``dfs.namenode.http-address[.<nameservice>.<id>]`` (``https-address`` when
    ``dfs.http.policy`` is ``HTTPS_ONLY``)."""
    props = hadoop_properties(directory)
    key = "dfs.namenode.https-address" if https_only(directory) else "dfs.namenode.http-address"
    ids = props.get(f"dfs.ha.namenodes.{authority}")
    if ids:
        keys = [f"{key}.{authority}.{i.strip()}" for i in ids.split(",")]
        return [props[k] for k in keys if k in props]
    rpc = props.get("dfs.namenode.rpc-address")
    http = props.get(key)
    if http and (rpc is None or rpc == authority or ":" not in authority):
        return [http]
    return []
