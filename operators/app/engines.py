"""What both engines do the same way: import a user transform, and claim a checkpoint directory.

A checkpoint directory holds ``pipeline.json`` (the pipeline identity and the engine that
wrote it) next to the engine's own checkpoints: the local engine's ``cut-*.json`` files or the
Spark engine's ``spark/`` checkpoint. A directory of another pipeline, or of the other engine
(whose checkpoints this engine cannot resume: it would start over and duplicate the output),
is refused with an error saying what to do.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from operators.common.plugins import load_callable
from operators.scan.housekeeping import AfterRead
from operators.scan.operator import ScanSettings, young_files
from operators.sink.owner import SINK_DIR, Owner, check_output, claim_output, read_owner
from region.atomic import read_whole, write_atomically
from region.errors import CheckpointError, ConfigError
from region.fs import FileSystem

__all__ = [
    "IDENTITY_FILE",
    "JobOutput",
    "check_after_read",
    "check_single_file",
    "claim_checkpoint_dir",
    "load_function",
    "read_identity",
    "warn_files_left",
    "warn_young_files_left",
]

logger = logging.getLogger(__name__)

IDENTITY_FILE = "pipeline.json"


def load_function(spec: str, folder: str) -> Callable[[Any], Any]:
    """The per-record function named ``"module:function"``; ``folder`` (the settings file's)
    is importable. Raises ConfigError naming the key and the value."""
    return load_callable(spec, "[transform] function", folder)


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def check_single_file(fs: FileSystem, directory: str, single: str | None) -> None:
    """At start: refuse a ``[source] file`` that is a symbolic link, a directory, a named pipe,
    a socket or a device (ConfigError naming it). The scan lists only regular files (links
    could lead out of the directory; a pipe would block a read), so the run would read nothing
    from it. Past the link check, opening it is the check (the backend refuses what is not a
    regular file, without waiting on a pipe). A missing file is left to
    :func:`warn_files_left`."""
    if single is None:
        return
    path = _join(directory, single)
    if fs.display(path).startswith("file:") and os.path.islink(path):
        target = os.path.realpath(path)
        msg = (
            f"[source] file {fs.display(path)} is a symbolic link (to {target}): links are not "
            f"read, so nothing would be. Name the file itself ([source] file = {target!r}) or "
            "put a copy of it there"
        )
        raise ConfigError(msg)
    try:
        fs.read(path, 0, 0)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        msg = (
            f"[source] file: {fs.display(path)} is a directory; name a regular file (or set "
            "[scan] directory to read the files in it)"
        )
        raise ConfigError(msg) from None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # what the backend answers for a special file
            msg = f"[source] file: {fs.display(path)} {exc.strerror}; name a regular file"
            raise ConfigError(msg) from None
        raise


def read_identity(fs: FileSystem, directory: str) -> dict[str, Any] | None:
    """The identity record of a checkpoint directory, or ``None`` when it has none."""
    path = _join(directory, IDENTITY_FILE)
    try:
        data = read_whole(fs, path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{fs.display(path)} is damaged ({exc}): restore it or remove it"
        raise CheckpointError(msg) from None
    if not isinstance(record, dict):
        raise CheckpointError(f"{fs.display(path)} is not a JSON object: restore or remove it")
    return record


#: Details stamped with the identity that a derived pipeline name depends on.
_PATH_DETAILS = ("scan", "sink")


def _owned_by_another(
    shown: str, record: Mapping[str, Any], pipeline_id: str, details: Mapping[str, str]
) -> str:
    """The refusal of a directory stamped by another pipeline identity, with both ways forward.

    A name derived from the paths (``auto-…``) changes when the user edits ``[scan] directory``
    or ``[sink] file``: that is the same job, and pinning the old name resumes it. A fresh
    checkpoint directory would instead read every file again and repeat the output.
    """
    owner = record.get("pipeline_id")
    msg = f"checkpoint directory {shown} belongs to pipeline {owner!r}, but this is pipeline "
    msg += f"{pipeline_id!r}"
    if not str(owner).startswith("auto-"):
        return (
            f"{msg}: two jobs must not share checkpoint directory {shown}; give this job its "
            "own [region] checkpoint_dir"
        )
    changes = [
        f"{key} was {record[key]} and is now {details[key]}"
        for key in _PATH_DETAILS
        if key in record and key in details and record[key] != details[key]
    ]
    why = "; ".join(changes) or "its name is derived from [scan] directory and [sink] file"
    return (
        f"{msg} ({why}). If this is the same job with changed paths, add name = {owner!r} at "
        "the top of the settings file: it resumes where it stopped (a new checkpoint_dir would "
        "read every file again and repeat the output). If it is another job, two jobs must not "
        f"share checkpoint directory {shown}: give it its own [region] checkpoint_dir"
    )


@dataclass(frozen=True)
class JobOutput:
    """The output directory a job writes (``directory`` on ``fs``), and its checkpoint
    location as the owner record shows it (Spark's checkpoint location on the Spark engine)."""

    fs: FileSystem
    directory: str
    checkpoint: str

    @property
    def sink_dir(self) -> str:
        """Where the sink records which job writes ``directory``."""
        return _join(self.directory, SINK_DIR)


def claim_checkpoint_dir(
    fs: FileSystem,
    directory: str,
    *,
    pipeline_id: str,
    engine: str,
    permission: int | None = 0o640,
    foreign_engine_files: Callable[[], bool] | None = None,
    own_engine_files: Callable[[], bool] | None = None,
    details: Mapping[str, str] | None = None,
    output: JobOutput | None = None,
) -> str:
    """Stamp ``directory`` with this pipeline and engine and claim ``output`` for this job
    (:mod:`operators.sink.owner`), or refuse either, writing nothing when refused; return the
    checkpoints' id (made when the directory is first stamped, so checkpoints deleted and
    started afresh get a new one, which the output directory tells apart). Claimed here, at
    start, so that a second job is refused at its start even while this one has nothing to
    write yet; the sinks check the claim again before they write.

    1. Read the stamp: another pipeline's or engine's is refused (CheckpointError).
    2. The id: the stamp's; else, when the directory holds this engine's checkpoints
       (``own_engine_files()``: the stamp was removed, or predates ids), the one the output
       records for this checkpoint location; else a new one.
    3. Check the output's owner: another job's is refused (ConfigError), before anything is
       written, so that a refused run leaves no stamp behind.
    4. Stamp the directory (or add the id to a stamp written before ids existed).
    5. Claim the output (of two jobs that both passed 3, one wins here).

    Call it while holding the directory's :class:`~region.lock.CheckpointLock`.
    ``foreign_engine_files()`` says whether checkpoints of the other engine are present in an
    unstamped directory. ``details`` are stored too (for ``inspect``; never credentials).
    """
    shown = fs.display(directory)
    # 1.
    record = read_identity(fs, directory)
    if record is not None:
        owner, used = record.get("pipeline_id"), record.get("engine")
        if owner != pipeline_id:
            raise CheckpointError(_owned_by_another(shown, record, pipeline_id, details or {}))
        if used != engine:
            msg = (
                f"checkpoint directory {shown} holds checkpoints of the {used} engine, which "
                f"the {engine} engine cannot resume (it would start over and repeat the "
                f"output): run with --engine {used}, or give a new [region] checkpoint_dir"
            )
            raise CheckpointError(msg)
    elif foreign_engine_files is not None and foreign_engine_files():
        other = "spark" if engine == "local" else "local"
        msg = (
            f"checkpoint directory {shown} holds checkpoints of the {other} engine: run with "
            f"--engine {other}, or give a new [region] checkpoint_dir"
        )
        raise CheckpointError(msg)
    # 2.
    known = record is not None and isinstance(record.get("id"), str)
    job_id = str(record["id"]) if record is not None and known else None
    if job_id is None and output is not None and own_engine_files is not None:
        theirs = read_owner(output.fs, output.sink_dir)
        if theirs is not None and theirs.same_place(Owner(output.checkpoint)):
            job_id = theirs.id if own_engine_files() else None
    job_id = job_id or uuid.uuid4().hex
    # 3.
    if output is not None:
        check_output(output.fs, output.sink_dir, Owner(output.checkpoint, job_id))
    # 4.
    if record is None:
        fs.mkdirs(directory)
        stamp = {**(details or {}), "pipeline_id": pipeline_id, "engine": engine, "id": job_id}
        _write_identity(fs, directory, stamp, permission)
        logger.info(
            "Checkpoint directory %s now belongs to pipeline %s (%s)", shown, pipeline_id, engine
        )
    elif not known:
        _write_identity(fs, directory, {**record, "id": job_id}, permission)
    # 5.
    if output is not None:
        job = Owner(output.checkpoint, job_id)
        claim_output(output.fs, output.sink_dir, job, permission=permission)
    return job_id


def check_after_read(
    fs: FileSystem, after_read: str, archive_dir: str | None, watched: str | None = None
) -> None:
    """At start: the archive directory (``archive_dir`` on ``fs``) of ``after_read =
    "archive"`` takes files moved from ``watched``. A run reads first and archives after its
    cut, and every recovery redoes the archive: a directory found unusable only then fails
    every restart. Raises ``ConfigError`` naming it."""
    if after_read == "archive":
        AfterRead("archive", fs, archive_dir=archive_dir).check(watched)


def _write_identity(
    fs: FileSystem, directory: str, record: Mapping[str, Any], permission: int | None
) -> None:
    body = json.dumps(record, indent=1) + "\n"
    write_atomically(
        fs,
        _join(directory, IDENTITY_FILE),
        body.encode(),
        overwrite=True,
        permission=permission,
        close_later=True,
    )


def warn_young_files_left(fs: FileSystem, settings: ScanSettings, directory: str) -> list[str]:
    """After an ``available_now`` run: say which files it left because they were younger than
    ``min_file_age`` (the next run reads them); return their paths. Both engines call it, so
    a run never ends "done" while leaving files unsaid."""
    left = young_files(fs, settings, directory)
    if left:
        shown = ", ".join(fs.display(p) for p in left[:5]) + (", ..." if len(left) > 5 else "")
        logger.warning(
            "The run ended with %d file(s) of %s unread because they are younger than "
            "min_file_age (%g s); the next run reads them: %s",
            len(left),
            fs.display(directory),
            settings.min_file_age,
            shown,
        )
    return left


def warn_files_left(
    fs: FileSystem,
    settings: ScanSettings,
    directory: str,
    single: str | None,
    *,
    read_any: bool = False,
) -> None:
    """After an ``available_now`` run (every run of a ``[source] file`` pipeline): the files
    left because they are too young, and the single file (its name: ``single``) when it is not
    there and this run read nothing (``read_any``: it did, and ``after_read`` may have moved
    the file away since), each in a WARNING."""
    warn_young_files_left(fs, settings, directory)
    if single is not None and not read_any and not fs.exists(_join(directory, single)):
        logger.warning(
            "[source] file %s does not exist: nothing was read from it; run again once it is there",
            fs.display(_join(directory, single)),
        )
