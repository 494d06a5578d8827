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
3. Build: when it does not exist, the run goes on without one, and starts a builder in the
   background (one at a time, by a lock file; at low priority, its output discarded): a small
   Spark job whose JVM writes the archive as it exits (``-XX:ArchiveClassesAtExit``), which
   takes it 10-40 s after the job. Writing it from the user's own run would make that run
   slower by as much, and its JVM, which outlives its Python, would hold the run's output
   pipes open until it is done.
4. Promote: the builder renames the finished archive into place (the JVM writes an archive's
   header last, so a file that starts with the archive's magic number is whole); a run that
   finds one a builder left unrenamed does the same. Unfinished ones a day old are deleted.

Nothing here can change what a run reads or writes: a missing, stale or damaged archive only
costs the time it would have saved. ``[spark] class_data_archive = false`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["JAVA_OPTIONS_KEY", "archive_options", "cache_dir"]

logger = logging.getLogger(__name__)

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: The first bytes of a finished dynamic archive (``0xf00baba8``, little-endian).
_MAGIC = bytes.fromhex("a8ab0bf0")
_SUFFIX = ".jsa"
#: An archive still unfinished this long after it was last written is a JVM's that died.
_ABANDONED_S = 24 * 3600
#: A builder's lock older than this is a builder's that died.
_BUILDING_S = 15 * 60
#: How long a builder waits for its JVM to finish the archive after the job.
_WRITE_WAIT_S = 600
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
    """The JVM options that map this setup's archive (see the module doc); ``""`` when there
    are none to give: the settings manage class data sharing themselves, the cache cannot be
    written, or there is no archive yet (then, with ``write``, a builder starts)."""
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
    if write:
        try:
            _start_builder(folder, archive.name, settings)
        except OSError as exc:
            logger.debug("no class-data archive builder: %s", exc)
    return ""


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
            finished = _finished(path)
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


def _start_builder(folder: Path, name: str, settings: Mapping[str, str]) -> None:
    """3. Start the builder of archive ``name`` in the background, unless one is at work."""
    lock = folder / f".{name}.building"
    failed = folder / f".{name}.failed"
    try:
        if time.time() - failed.stat().st_mtime < _ABANDONED_S:
            return  # the last builder failed: not again every run (its marker says when)
    except FileNotFoundError:
        pass
    try:
        if time.time() - lock.stat().st_mtime < _BUILDING_S:
            return  # one is at work
        lock.unlink(missing_ok=True)  # its builder died
    except FileNotFoundError:
        pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return  # another run started one just now
    os.close(fd)
    class_path = {k: settings[k] for k in _CLASS_PATH_KEYS if k in settings}
    command = [sys.executable, "-m", __name__, str(folder), name, json.dumps(class_path)]
    try:
        pid = _spawn(command)
    except OSError as exc:
        lock.unlink(missing_ok=True)
        logger.debug("no class-data archive builder: %s", exc)
        return
    logger.info(
        "this run's JVM loads Spark's classes from its jars; a class-data archive that later "
        "runs map to start faster is being built in the background (pid %s, %s)",
        pid,
        folder / name,
    )


def _spawn(command: list[str]) -> int:
    """Start ``command`` detached, its output discarded; its pid."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not stopped by the run's Ctrl-C, nor waited for
    )
    return process.pid


#: The builder's job: a session and a Python job, as a fused run's (its JVM writes the archive
#: of the classes they loaded when it exits, after this process).
_JOB = """
import json, sys
from operators.spark.session import build_session
conf = {**json.loads(sys.argv[2]), "spark.driver.extraJavaOptions": sys.argv[1]}
spark = build_session("hdfs-region class-data", conf=conf, data_sources=False, class_data=False)
def same(batches):
    yield from batches
spark.range(0, 4, 1, 2).mapInArrow(same, "id long").collect()
spark.sql("SELECT 1 AS one").collect()
spark.stop()
"""


def build(folder: Path, name: str, class_path: Mapping[str, str]) -> bool:
    """3.-4. Run the job whose JVM writes the archive, wait for it, rename it into place;
    whether it is there now."""
    archive = folder / name
    writing = folder / f".{name}.{uuid.uuid4().hex}.tmp"
    options = f"-XX:ArchiveClassesAtExit={writing} {_QUIET}"
    try:
        subprocess.run(
            [sys.executable, "-c", _JOB, options, json.dumps(dict(class_path))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_WRITE_WAIT_S,
            check=True,
        )
        # The JVM writes the archive after its Python has gone.
        deadline = time.monotonic() + _WRITE_WAIT_S
        while time.monotonic() < deadline and not _finished(writing):
            time.sleep(1)
        _promote(folder, archive)
    finally:
        if not archive.is_file():
            # Marked, so that runs do not start a failing builder each (for a day).
            (folder / f".{name}.failed").touch()
        (folder / f".{name}.building").unlink(missing_ok=True)
    return archive.is_file()


def _finished(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(_MAGIC)) == _MAGIC
    except FileNotFoundError:
        return False


def main(argv: Sequence[str]) -> int:
    """The builder's process: ``FOLDER NAME CLASS_PATH_JSON``."""
    os.nice(10)  # behind the runs it is for
    folder, name, class_path = Path(argv[0]), argv[1], json.loads(argv[2])
    return 0 if build(folder, name, class_path) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
