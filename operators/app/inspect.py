"""``hdfs-region inspect``: the cuts of a checkpoint directory, who holds it, and the
operators' state in the newest valid cut. For the Spark engine the cuts are its micro-batches
(Spark's offset and commit logs), and the sink's part comes from its own log
(:class:`operators.spark.commit.SinkLog`)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from operators.app.config import load_pipeline
from operators.app.console import EXIT_FAILURE, EXIT_OK, clean, config_error, error
from region.errors import ConfigError, RegionError

if TYPE_CHECKING:
    from operators.fs.settings import FileSystemSettings
    from region.fs import FileStatus, FileSystem

__all__ = ["inspect"]


_SECRET_KEYS = ("password", "token", "secret", "keytab", "credential")


def _redact(value: Any) -> Any:
    """A state with anything that could be a credential removed (none is expected there)."""
    if isinstance(value, dict):
        return {
            k: "<redacted>" if any(s in str(k).lower() for s in _SECRET_KEYS) else _redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, str):
        return clean(value)
    return value


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _readable(state: Any) -> Any:
    """``state`` with every scan cursor state shown as counts (its window and census are
    compressed), whatever operator nests it."""
    from operators.scan.cursor import describe_state

    if isinstance(state, dict):
        if "census" in state:
            return describe_state(state)
        return {k: _readable(v) for k, v in state.items()}
    return state


def _print_state(name: str, state: Any, out: TextIO) -> None:
    print(f"  operator {name!r}:", file=out)
    text = json.dumps(_redact(_readable(state)), indent=2, sort_keys=True, ensure_ascii=False)
    for line in text.splitlines():
        print(f"    {line}", file=out)


def inspect(target: str) -> int:
    """Print what a checkpoint directory (or a pipeline TOML's) holds; return the exit code."""
    # The local disk's listings warn about the entries they leave out (symbolic links): that
    # is about a job's input, and says nothing about checkpoints. Errors still show.
    listing = logging.getLogger("operators.fs.local")
    level = listing.level
    listing.setLevel(logging.ERROR)
    try:
        return _inspect(target)
    finally:
        listing.setLevel(level)


def _inspect(target: str) -> int:
    from operators.app.engines import read_identity
    from operators.fs import open_path
    from region.lock import CheckpointLock

    fs_settings = None
    if target.endswith(".toml") and os.path.isfile(target):
        try:
            config = load_pipeline(target)
        except ConfigError as exc:
            return config_error(exc)
        fs_settings = config.filesystem
        target = config.region.checkpoint_dir
    fs, directory = open_path(target, fs_settings)
    out = sys.stdout
    print(f"checkpoint directory {fs.display(directory)}", file=out)
    try:
        identity = read_identity(fs, directory)
        holder = CheckpointLock(fs, directory).holder()
    except RegionError as exc:
        error(str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        error(f"cannot read checkpoint directory {fs.display(directory)}: {exc}")
        return EXIT_FAILURE
    if identity is not None:
        print(
            f"pipeline: {identity.get('pipeline_id')} ({identity.get('engine')} engine)", file=out
        )
    if holder is None:
        print("lock: none", file=out)
    elif holder.released:
        print(f"lock: free (last held by {holder.owner})", file=out)
    else:
        print(f"lock: {holder.describe(time.time())}", file=out)
    try:
        if fs.exists(directory.rstrip("/") + "/spark"):
            return _inspect_spark(fs, directory, identity, fs_settings, out)
        return _inspect_cuts(fs, directory, out)
    except OSError as exc:
        error(f"cannot read checkpoint directory {fs.display(directory)}: {exc}")
        return EXIT_FAILURE


def _inspect_cuts(fs: FileSystem, directory: str, out: TextIO) -> int:
    """The local engine's region checkpoints."""
    from region.checkpoint import CheckpointStore

    infos = CheckpointStore(fs, directory).list()
    if not infos:
        if not fs.exists(directory):
            error(f"no checkpoint directory {fs.display(directory)} (nothing has run there)")
            return EXIT_FAILURE
        print("no checkpoints (a run here starts from the beginning)", file=out)
        return EXIT_OK
    print(f"{len(infos)} cut(s), oldest first:", file=out)
    print(f"  {'cut':>6}  {'written':19}  {'bytes':>8}  status", file=out)
    for info in infos:
        status = "valid" if info.valid else f"NOT VALID: {info.reason}"
        print(
            f"  {info.cut_id:>6}  {_iso(info.created):19}  {info.size:>8}  {clean(status)}",
            file=out,
        )
    valid = [i for i in infos if i.valid]
    if not valid:
        print("no valid cut: a run here fails unless start_fresh = true", file=out)
        return EXIT_FAILURE
    try:
        checkpoint = CheckpointStore(fs, directory, pipeline_id=valid[-1].pipeline_id).latest()
    except RegionError as exc:
        error(str(exc))
        return EXIT_FAILURE
    if checkpoint is None:  # deleted meanwhile
        return EXIT_FAILURE
    print(f"newest valid cut {checkpoint.cut_id} ({_iso(checkpoint.created)})", file=out)
    print(f"  pipeline: {checkpoint.pipeline_id}", file=out)
    for key, value in sorted(checkpoint.meta.items()):
        print(f"  {key}: {clean(str(value))}", file=out)
    for name, state in checkpoint.operators.items():
        _print_state(name, state, out)
    return EXIT_OK


def _spark_batch(fs: FileSystem, path: str) -> dict[str, Any]:
    """The source offset of a Spark offset-log file (``v1``, batch metadata, one line per
    source); ValueError saying what is wrong."""
    lines = fs.read(path).decode("utf-8", "replace").splitlines()
    if not lines or lines[0] != "v1":
        raise ValueError(f"not a Spark offset log file (first line {lines[:1]!r})")
    if len(lines) < 3:
        raise ValueError(f"truncated: {len(lines)} line(s), expected 3")
    offset = json.loads(lines[2])
    if not isinstance(offset, dict):
        raise ValueError("the source offset is not a JSON object")
    return offset


def _inspect_spark(
    fs: FileSystem,
    directory: str,
    identity: dict[str, Any] | None,
    fs_settings: FileSystemSettings | None,
    out: TextIO,
) -> int:
    """The Spark engine's checkpoint: one cut per micro-batch (offset log + commit log)."""
    from operators.fs import open_path

    base = directory.rstrip("/") + "/spark/"

    def numbered(sub: str) -> dict[int, FileStatus]:
        try:
            entries = fs.list_dir(base + sub)
        except FileNotFoundError:
            return {}
        return {int(s.name): s for s in entries if s.name.isdigit()}

    offsets, commits = numbered("offsets"), numbered("commits")
    if not offsets:
        print("no batches yet (a run here starts from the beginning)", file=out)
        return EXIT_OK
    print(f"{len(offsets)} batch(es) (Spark's cuts), oldest first:", file=out)
    print(f"  {'batch':>6}  {'written':19}  {'bytes':>8}  status", file=out)
    newest: tuple[int, dict[str, Any]] | None = None
    for batch, status in sorted(offsets.items()):
        try:
            offset = _spark_batch(fs, status.path)
        except (ValueError, UnicodeDecodeError) as exc:
            verdict = f"NOT VALID: {exc}"
        else:
            if batch in commits:
                verdict = "committed"
                newest = (batch, offset)
            else:
                verdict = "planned, not committed (replayed at the next start)"
        written = _iso(status.mtime_ns / 1e9)
        print(f"  {batch:>6}  {written:19}  {status.size:>8}  {verdict}", file=out)
    if newest is None:
        print("no committed batch yet", file=out)
        return EXIT_OK
    batch, offset = newest
    print(f"newest committed batch {batch}", file=out)
    _print_state("hdfs_scan", offset, out)
    sink_log = (identity or {}).get("sink_log")
    if isinstance(sink_log, str):
        from operators.spark.commit import SinkLog

        state: dict[str, Any]
        try:
            log_fs, log_dir = open_path(sink_log, fs_settings)
            entry = SinkLog(log_fs, log_dir, log_dir).entry(batch)
            state = entry if entry is not None else {"unavailable": "no sink log entry"}
        except (OSError, ValueError) as exc:
            state = {"unavailable": f"{type(exc).__name__}: {exc}"}
        _print_state("hdfs_sink", state, out)
    return EXIT_OK
