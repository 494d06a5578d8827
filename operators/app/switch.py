"""``hdfs-region switch CONFIG.toml DIRECTORY``: tell the running job (local engine) to watch
another directory, or, given the directory it watches, to list it again at once.

The request goes into the control file of the job's checkpoint directory
(:mod:`operators.control`); the scan applies it under a permit and the next cut records it, so
a restart keeps the switched directory. The job need not run: the next run applies it.
"""

from __future__ import annotations

import os
import posixpath

from operators.app.config import PipelineConfig
from operators.app.engines import read_identity
from operators.control import CONTROL_FILE, SwitchRequest, request_switch
from operators.fs import open_path
from operators.scan import within_roots
from region.errors import ConfigError

__all__ = ["control_path", "switch_directory"]


def control_path(checkpoint_dir: str) -> str:
    """The control file in a checkpoint directory (a path on its filesystem)."""
    return posixpath.join(checkpoint_dir, CONTROL_FILE)


def switch_directory(config: PipelineConfig, directory: str) -> tuple[str, SwitchRequest]:
    """Request the switch; the directory as the job will watch it (URI) and the request.
    ConfigError naming what stands in the way."""
    if config.single_file is not None:
        msg = (
            f"[source] file: {config.single_file!r} is read on its own, there is no directory "
            "to switch: use [scan] directory"
        )
        raise ConfigError(msg)
    scan_fs_settings, _ = config.locate(config.scan_directory)
    target_settings, target = config.locate(directory)
    if target_settings.display("/") != scan_fs_settings.display("/"):
        msg = (
            f"{directory!r} is not on the filesystem of [scan] directory "
            f"{config.display(config.scan_directory)!r}: a scan switches within its filesystem"
        )
        raise ConfigError(msg)
    if scan_fs_settings.kind == "local" and not directory.startswith("file:"):
        target = os.path.abspath(directory)  # a command-line path: against the working folder
    roots = config.scan.roots
    if roots is not None:
        on_fs = tuple(config.locate(root)[1] for root in roots)
        if not within_roots(target, on_fs):
            msg = f"{directory!r} is outside [scan] roots {list(roots)!r}"
            raise ConfigError(msg)
    sink = config.sink
    output = posixpath.dirname(sink.template) if sink.template is not None else sink.directory
    shown_target = target_settings.display(target)
    if output is not None and posixpath.normpath(shown_target) == posixpath.normpath(
        config.display(output or ".")
    ):
        msg = f"{directory!r} is the output directory: the scan would read the job's own output"
        raise ConfigError(msg)
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    identity = read_identity(cp_fs, cp_dir)
    engine = identity.get("engine") if identity is not None else config.engine
    if engine == "spark":
        msg = (
            "the spark engine does not read switch requests: stop the job, set [scan] "
            "directory, and start it again (or run the pipeline with --engine local)"
        )
        raise ConfigError(msg)
    cp_fs.mkdirs(cp_dir)
    request = request_switch(
        cp_fs, control_path(cp_dir), target, permission=config.region.checkpoint_permission
    )
    scan_fs, _ = open_path(config.scan_directory, config.filesystem)
    return scan_fs.display(target), request
