"""The published-files manifest: what a sink published, one file per cut, for downstream jobs.

With ``[sink] manifest = true`` every cut (in-process) or micro-batch (Spark) that publishes files
writes ``<output>/_hdfs_sink/published/<id:020d>.json``: a JSON list of ``{"path", "size", "cut"}``
(and ``"partition"``, the values of a partitioned output), after the files have their final names.
A query's stop that publishes the files it kept open writes ``<id:020d>.stop.json``. Each manifest
is written atomically, and written again with the same content when a crash interrupted the cut's
publication, so a reader that takes the names in sorted order, remembering the last one it read
(:func:`read_manifests`), sees every published file exactly once, in publication order. The newest
``retain`` manifests are kept. Records never write into ``_hdfs_sink`` (names from data starting
with ``_`` are refused, :mod:`operators.common.safepath`), and :func:`read_manifests`
refuses a manifest naming a file outside the output or inside ``_hdfs_sink``.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from operators.sink.owner import SINK_DIR
from region.atomic import dir_permission, write_atomically
from region.fs import FileSystem

__all__ = ["MANIFEST_DIR", "Published", "manifest_dir", "read_manifests", "write_manifest"]

logger = logging.getLogger(__name__)

MANIFEST_DIR = "published"
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Published:
    """One published file."""

    path: str
    size: int
    cut: int
    #: The partition's values (``partition_by``), as in its directory names.
    partition: dict[str, str | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": self.path, "size": self.size, "cut": self.cut}
        if self.partition is not None:
            entry["partition"] = self.partition
        return entry


def manifest_dir(output_dir: str) -> str:
    """Where the manifests of a sink writing into ``output_dir`` go."""
    return posixpath.join(output_dir, SINK_DIR, MANIFEST_DIR)


def _name(cut: int, stop: bool) -> str:
    # ".stop.json" sorts after ".json" of the same id and before the next id: sorted names
    # are the order of publication.
    return f"{cut:020d}{'.stop' if stop else ''}{_SUFFIX}"


def write_manifest(
    fs: FileSystem,
    directory: str,
    cut: int,
    files: Sequence[Published],
    *,
    stop: bool = False,
    retain: int = 1000,
    permission: int | None = 0o640,
) -> str | None:
    """Record ``files`` as published by ``cut`` (nothing when empty). Idempotent: the same
    content under the same name. Returns the manifest's path."""
    if not files:
        return None
    if not fs.exists(directory):
        fs.mkdirs(directory, permission=dir_permission(permission))
    path = posixpath.join(directory, _name(cut, stop))
    data = json.dumps([f.to_dict() for f in files], indent=0).encode()
    write_atomically(fs, path, data, overwrite=True, permission=permission)
    _retire(fs, directory, retain)
    return path


def _manifest_names(fs: FileSystem, directory: str) -> list[str]:
    try:
        listing = fs.list_dir(directory)
    except FileNotFoundError:
        return []
    return sorted(
        s.name for s in listing if s.name.endswith(_SUFFIX) and s.name.split(".")[0].isdigit()
    )


def _retire(fs: FileSystem, directory: str, retain: int) -> None:
    names = _manifest_names(fs, directory)
    for name in names[: max(0, len(names) - max(1, retain))]:
        fs.delete(posixpath.join(directory, name))


def read_manifests(
    fs: FileSystem, directory: str, after: str | None = None
) -> list[tuple[str, list[Published]]]:
    """The manifests after the one named ``after`` (all when ``None``), oldest first, as
    ``(name, files)``: a downstream job keeps the last name it processed and asks again.

    ``directory`` is ``<output>/_hdfs_sink/published`` (:func:`manifest_dir`). A manifest that
    is not JSON, or names a file outside ``<output>`` or inside the sink's own folder (no sink
    writes such a manifest: it was put there by someone else), raises ValueError naming it
    and the entry: a downstream job acting on it could read or delete any file."""
    output = posixpath.dirname(posixpath.dirname(posixpath.normpath(directory)))
    out: list[tuple[str, list[Published]]] = []
    for name in _manifest_names(fs, directory):
        if after is not None and name <= after:
            continue
        path = posixpath.join(directory, name)
        out.append((name, _parse(fs, path, output, fs.read(path))))
    return out


def _parse(fs: FileSystem, path: str, output: str, raw: bytes) -> list[Published]:
    """The entries of the manifest at ``path``, each checked to name a file of ``output``."""
    try:
        entries = [
            (e["path"], int(e["size"]), int(e["cut"]), e.get("partition")) for e in json.loads(raw)
        ]
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"manifest {fs.display(path)} is not a list of published files ({exc!r})"
        raise ValueError(msg) from None
    # Compared as the filesystem shows them: relative and absolute spellings agree.
    root = fs.display(output or ".").rstrip("/") + "/"
    own = fs.display(posixpath.join(output, SINK_DIR)).rstrip("/") + "/"
    files: list[Published] = []
    for where, size, cut, partition in entries:
        if not isinstance(where, str) or not where:
            problem = "which is not a path"
        else:
            shown = fs.display(posixpath.normpath(where)).rstrip("/") + "/"
            if not shown.startswith(root) or shown == root:
                problem = f"which is outside {root.rstrip('/')}"
            elif shown.startswith(own):
                problem = f"which is in the sink's own folder {own.rstrip('/')}"
            else:
                files.append(Published(where, size, cut, partition))
                continue
        msg = f"manifest {fs.display(path)} lists {where!r}, {problem}: no sink wrote it"
        raise ValueError(msg)
    return files
