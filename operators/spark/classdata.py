"""A class-data archive for the driver's JVM (Java's AppCDS), so that a Spark run starts faster.

Most of a short Spark run is its JVM: about 11 s from launch to a ready SparkSession and 7 s more
for the first job on 2 cores, loading, verifying and interpreting tens of thousands of classes
from Spark's jars. A dynamic class-data archive holds those classes as a JVM left them, already
parsed and verified; the next JVM maps it instead (measured: a one-line run 18.6 s -> 12.0 s on
a quiet machine, 28-35 s -> 17-19 s at load 3.6). What a run does with it:

1. Name: the archive is named by a digest of what the JVM's classes come from: the Java
   runtime (its real path and ``release`` file) and Spark's jars (names and sizes), with the
   extra class path settings. Another Java or Spark release gets an archive of its own.
2. Use: when the archive exists, the JVM maps it (``-XX:SharedArchiveFile``). The JVM checks it
   against its own class path; one it cannot use is ignored and the JVM starts as it would
   have without one. CDS logging is off, so no warning says so.
3. Write: when it does not exist, this run's JVM writes one at its exit
   (``-XX:ArchiveClassesAtExit``) under a name of its own. PySpark's JVM exits after the Python
   process that started it, so the archive appears a few seconds after the run has ended.
4. Promote: the next run renames a finished one into place (the JVM writes an archive's header
   last, so a file that starts with the archive's magic number is whole). Of concurrent
   writers the first renamed wins; the others are deleted, as are unfinished ones a day old.

Nothing here can change what a run reads or writes: a missing, stale or damaged archive only
costs the time it would have saved. ``[spark] class_data_archive = false`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

__all__ = ["JAVA_OPTIONS_KEY", "archive_options", "cache_dir"]

logger = logging.getLogger(__name__)

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: The first bytes of a finished dynamic archive (``0xf00baba8``, little-endian).
_MAGIC = bytes.fromhex("a8ab0bf0")
_SUFFIX = ".jsa"
#: An archive still unfinished this long after it was last written is a JVM's that died.
_ABANDONED_S = 24 * 3600
#: Archives kept (of other Java or Spark releases, the least recently used go first).
_KEEP = 2
#: Settings that put classes on the driver's class path.
_CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages")
#: Options by which the user manages class data sharing already: left alone.
_OWN_OPTIONS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
#: Silences the JVM's CDS messages: an archive it cannot use is not worth a warning.
_QUIET = "-Xlog:cds*=off"


def cache_dir() -> Path:
    """Where the archives are kept: ``$XDG_CACHE_HOME/hdfs-region/class-data``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "hdfs-region" / "class-data"


def archive_options(
    java: str, settings: Mapping[str, str], folder: Path | None = None, *, write: bool = True
) -> str:
    """The JVM options that use this setup's archive, or write it (see the module doc; not
    with ``write`` false: a JVM that lives long, whose archive would come too late to help);
    ``""`` when there are none to give (the settings manage class data sharing themselves, or
    the cache cannot be written)."""
    given = settings.get(JAVA_OPTIONS_KEY, "")
    if any(option in given for option in _OWN_OPTIONS):
        return ""
    folder = folder or cache_dir()
    try:
        name = _archive_name(java, settings)
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / name
        # 4. A finished archive a run before this one wrote, renamed into place.
        _promote(folder, archive)
        if archive.is_file():
            # 2. Used; its time marks it as recently used.
            os.utime(archive)
            _prune(folder, keep=archive)
            return f"-XX:SharedArchiveFile={archive} {_QUIET}"
    except OSError as exc:
        logger.debug("no class-data archive for the JVM: %s", exc)
        return ""
    if not write:
        return ""
    # 3. Written by this run's JVM at its exit.
    writing = folder / f".{name}.{uuid.uuid4().hex}.tmp"
    logger.info(
        "the JVM writes a class-data archive when it exits (%s): later runs start faster",
        archive,
    )
    return f"-XX:ArchiveClassesAtExit={writing} {_QUIET}"


def _archive_name(java: str, settings: Mapping[str, str]) -> str:
    """1. The archive's name: a digest of the Java runtime, Spark's jars and the extra class
    path settings."""
    import pyspark

    digest = hashlib.sha256()
    home = Path(os.path.realpath(java)).parent.parent
    digest.update(str(home).encode())
    release = home / "release"
    digest.update(release.read_bytes() if release.is_file() else b"")
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.iterdir()) if jars.is_dir() else ():
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    for key in _CLASS_PATH_KEYS:
        digest.update(f"{key}={settings.get(key, '')}\n".encode())
    return f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}{_SUFFIX}"


def _promote(folder: Path, archive: Path) -> None:
    """Rename a finished archive of ``archive``'s name into place; delete the other finished
    ones (concurrent writers) and those abandoned unfinished."""
    now = time.time()
    for path in folder.glob(f".{archive.name}.*.tmp"):
        try:
            with path.open("rb") as f:
                finished = f.read(len(_MAGIC)) == _MAGIC
            if finished and not archive.exists():
                path.replace(archive)
                logger.info("class-data archive for the JVM: %s", archive)
            elif finished or now - path.stat().st_mtime > _ABANDONED_S:
                path.unlink()
        except FileNotFoundError:
            continue  # another run took it


def _prune(folder: Path, keep: Path) -> None:
    """Keep ``keep`` and the most recently used archives, ``_KEEP`` in all."""
    others = sorted(
        (p for p in folder.glob(f"*{_SUFFIX}") if p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in others[_KEEP - 1 :]:
        path.unlink(missing_ok=True)
