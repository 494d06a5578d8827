"""``hdfs-region switch CONFIG.toml DIRECTORY``: tell the job (local engine) to watch another
directory, or, given the directory it watches, to list it again at once.

The request goes into the control file of the job's checkpoint directory
(:mod:`operators.scan.control`); the scan applies it under a permit and the next cut records it, so
a restart keeps the switched directory. The job need not run: then the request is pending, and
the next start applies it (:attr:`Switch.running` tells which).

DIRECTORY is resolved as the settings file's own paths are (:func:`resolve_path`: a relative
one from the settings file's folder, never from the shell's). It must be a directory, or not
exist yet (then it is empty until it appears, as ``[scan] directory``; refused with
``strict_mode``). At start, a request naming something that is not a directory stops the run
before anything is read, naming the request and how to replace it
(:func:`check_pending_switch`).
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass
from typing import Any

from operators.app.config import PipelineConfig, resolve_path
from operators.app.console import command
from operators.app.engines import read_identity
from operators.copy.identity import mark, same_file
from operators.fs import open_path
from operators.scan.control import (
    CONTROL_FILE,
    ControlFile,
    SwitchRequest,
    read_switch,
    request_switch,
)
from operators.scan.housekeeping import archive_folder
from operators.scan.operator import roots_problem, within_roots
from region.errors import ConfigError, RegionError
from region.fs import FileSystem
from region.lock import CheckpointLock

__all__ = [
    "Cancel",
    "Switch",
    "cancel_switch",
    "check_pending_switch",
    "control_path",
    "switch_directory",
]


def control_path(checkpoint_dir: str) -> str:
    """The control file in a checkpoint directory (a path on its filesystem)."""
    return posixpath.join(checkpoint_dir, CONTROL_FILE)


@dataclass(frozen=True)
class Switch:
    """A request written: the directory as the job will watch it (a URI), the request, the
    job holding the checkpoint directory (``None``: none runs, the request is pending) and
    whether the directory exists yet."""

    shown: str
    request: SwitchRequest
    running: str | None
    exists: bool


def _directory_problem(fs: FileSystem, path: str) -> str | None:
    """Why the scan cannot watch ``path``, or ``None``; ``""`` when it does not exist (yet)."""
    try:
        status = fs.status(path)
    except FileNotFoundError:
        return ""
    if not status.is_dir:
        return f"{fs.display(path)} is not a directory (a scan watches a directory)"
    return None


def _same_directory(fs: FileSystem, path: str, other_fs: FileSystem, other: str) -> bool:
    """Whether ``path`` on ``fs`` is ``other`` on ``other_fs``: by name, or by identity when
    both exist (a link to it, another URI of its NameNode)."""
    if posixpath.normpath(fs.display(path)) == posixpath.normpath(other_fs.display(other)):
        return True
    try:
        here, there = mark(fs, path), mark(other_fs, other)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return bool(same_file(fs, path, here, other_fs, other, there))


def _taken(config: PipelineConfig, scan_fs: FileSystem, target: str) -> str | None:
    """What ``target`` already is to the job that a scan may not watch (its output, its
    checkpoints, its archive: each read would feed the job its own files), or ``None``."""
    sink = config.sink
    output = posixpath.dirname(sink.template) if sink.template is not None else sink.directory
    if output is not None and _same_directory(
        scan_fs, target, *open_path(output or ".", config.filesystem)
    ):
        return "the output directory: the scan would read the job's own output"
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    if _same_directory(scan_fs, target, cp_fs, cp_dir):
        return (
            "the job's checkpoint directory: the scan would read (and after_read archive or "
            "delete) the checkpoint files"
        )
    archive_dir = config.scan.archive_dir
    if config.scan.after_read == "archive" and archive_dir is not None:
        archive_fs, archive = open_path(archive_dir, config.filesystem)
        if _same_directory(scan_fs, target, archive_fs, archive_folder(archive, time.time())):
            return (
                "the archive directory of [scan] after_read = 'archive': an archived file "
                "would stay there, renamed, and be read again as a new file"
            )
    return None


def _is_the_settings_file(config: PipelineConfig, directory: str) -> bool:
    """Whether DIRECTORY names the settings file itself (``switch job.toml job.toml``), from
    the shell's folder or from the settings file's."""
    settings = os.path.abspath(config.path)
    for candidate in (directory, os.path.join(config.folder, directory)):
        if os.path.abspath(candidate) == settings:
            return True
        try:
            if os.path.samefile(candidate, settings):
                return True
        except OSError:
            continue
    return False


def switch_directory(config: PipelineConfig, directory: str) -> Switch:
    """Request the switch. ConfigError naming what stands in the way."""
    if _is_the_settings_file(config, directory):
        msg = (
            f"DIRECTORY {directory!r} is the settings file {config.path}, not a directory to "
            f"watch: nothing stored. Give the directory, e.g. "
            f"`{command('switch', config.path, 'landing-2')}`"
        )
        raise ConfigError(msg)
    if config.single_file is not None:
        msg = (
            f"[source] file: {config.single_file!r} is read on its own, there is no directory "
            "to switch: use [scan] directory"
        )
        raise ConfigError(msg)
    # 1. Where DIRECTORY is: as the settings file's own paths are resolved.
    try:
        resolved = resolve_path(
            directory, key="DIRECTORY", base=config.folder, filesystem=config.filesystem
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    scan_fs_settings, _ = config.locate(config.scan_directory)
    target_settings, target = config.locate(resolved)
    if target_settings.display("/") != scan_fs_settings.display("/"):
        msg = (
            f"{directory!r} is not on the filesystem of [scan] directory "
            f"{config.display(config.scan_directory)!r}: a scan switches within its filesystem"
        )
        raise ConfigError(msg)
    scan_fs, _ = open_path(config.scan_directory, config.filesystem)
    roots = config.scan.roots
    if roots is not None:
        on_fs = tuple(config.locate(root)[1] for root in roots)
        if not within_roots(target, on_fs):
            msg = f"{directory!r} is outside [scan] roots {list(roots)!r}"
            raise ConfigError(msg)
        # As the scan checks a request (a link inside a root may lead out of it).
        problem = roots_problem(scan_fs, target, on_fs)
        if problem is not None:
            raise ConfigError(f"{directory!r} {problem} ([scan] roots)")
    taken = _taken(config, scan_fs, target)
    if taken is not None:
        raise ConfigError(f"{directory!r} is {taken}")
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    identity = read_identity(cp_fs, cp_dir)
    engine = identity.get("engine") if identity is not None else config.engine
    if engine == "spark":
        msg = (
            "the spark engine does not read switch requests: stop the job, set [scan] "
            "directory, and start it again (or run the pipeline with --engine local)"
        )
        raise ConfigError(msg)
    # 2. What is there: a directory, or nothing yet (as [scan] directory, unless strict).
    problem = _directory_problem(scan_fs, target)
    if problem:
        raise ConfigError(problem)
    if problem == "" and config.scan.strict_mode:
        msg = (
            f"{scan_fs.display(target)} does not exist, and [scan] strict_mode = true makes a "
            "missing directory fatal: create it first"
        )
        raise ConfigError(msg)
    # 3. The request, and whether a job is there to apply it now.
    cp_fs.mkdirs(cp_dir)
    request = request_switch(
        cp_fs, control_path(cp_dir), target, permission=config.region.checkpoint_permission
    )
    running = CheckpointLock(cp_fs, cp_dir).in_use()
    return Switch(scan_fs.display(target), request, running, exists=problem is None)


@dataclass(frozen=True)
class Cancel:
    """What ``switch --cancel`` found in the control file (a URI): the request removed, or
    ``None`` (there was none); ``applied_by``: the cut that recorded it applied (then it is
    not pending, and it stays); ``running``: the job holding the checkpoint directory (then
    nothing is removed: it applies a request within a second of it)."""

    control: str
    request: SwitchRequest | None
    #: The requested directory as a URI.
    directory: str = ""
    applied_by: int | None = None
    running: str | None = None


def _recorded_switch(state: Any) -> int:
    """The newest switch request a checkpointed state says was applied (``switch``: its seq),
    whatever operator nests the scan's state; 0 for none."""
    if isinstance(state, dict):
        found = state.get("switch")
        own = found if isinstance(found, int) else 0
        return max([own, *(_recorded_switch(v) for v in state.values())])
    return 0


def _applied_by(config: PipelineConfig, cp_fs: FileSystem, cp_dir: str, seq: int) -> int | None:
    """The newest cut when it records the request ``seq`` as applied, else ``None``."""
    from region.checkpoint import CheckpointStore

    try:
        newest = CheckpointStore(cp_fs, cp_dir, pipeline_id=config.pipeline_id()).latest()
    except RegionError:
        return None
    if newest is None or _recorded_switch(newest.operators) < seq:
        return None
    return newest.cut_id


def cancel_switch(config: PipelineConfig) -> Cancel:
    """Remove the pending switch request of ``config``'s job, if there is one (see
    :class:`Cancel`). ConfigError when the control file is not a request."""
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    path = control_path(cp_dir)
    shown = cp_fs.display(path)
    try:
        request = read_switch(cp_fs, path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if request is None:
        return Cancel(shown, None)
    directory = open_path(config.scan_directory, config.filesystem)[0].display(request.directory)
    running = CheckpointLock(cp_fs, cp_dir).in_use()
    if running is not None:
        return Cancel(shown, request, directory, running=running)
    applied = _applied_by(config, cp_fs, cp_dir, request.seq)
    if applied is None:
        cp_fs.delete(path)
    return Cancel(shown, request, directory, applied_by=applied)


def check_pending_switch(config: PipelineConfig, control: ControlFile, scan_fs: FileSystem) -> None:
    """At start: ConfigError when the control file's request names something that is not a
    directory (it became a file after the switch), which the scan would fail on at every
    start, or one it may not watch (a link made since to the output, checkpoint or archive
    directory); the message names the request and how to replace it. A request already applied
    is checked too: the scan watches that path since."""
    request = control.read()
    if request is None:
        return
    problem = _directory_problem(scan_fs, request.directory)
    if problem is None:  # a directory: one the scan may watch (it may have become a link)
        taken = _taken(config, scan_fs, request.directory)
        problem = None if taken is None else f"{scan_fs.display(request.directory)}, {taken}"
    if problem:
        msg = (
            f"the switch request in {control.fs.display(control.path)} names {problem}: switch "
            f"to a directory (the one to watch) with `{command('switch', config.path)} "
            "DIRECTORY`, which replaces it"
        )
        raise ConfigError(msg)
