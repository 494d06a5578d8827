"""The ``hdfs-region`` command: run a pipeline, inspect its checkpoints, or watch the demo.

Exit codes: 0 success; 1 runtime failure (the region failed after its reset attempts, the
checkpoint directory is in use or unusable, an I/O error), with the cause; 2 configuration
error, with one line per bad key naming it and its value.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from operators.config import ENGINES, PipelineConfigError, load_pipeline
from operators.fs.errors import scrub
from operators.progress import LiveLineHandler, Progress, ProgressDisplay, format_count
from region.errors import ConfigError, RegionError

if TYPE_CHECKING:
    from operators.fs.settings import FileSystemSettings
    from region.fs import FileStatus, FileSystem

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "EXIT_OK", "main"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

PROG = "hdfs-region"


def _clean(text: str) -> str:
    # Tokens travel in URL query strings and passwords in user:pass@: never print either.
    return scrub(text) if "://" in text else text


def _error(message: str, stream: TextIO | None = None) -> None:
    print(f"{PROG}: error: {_clean(message)}", file=stream or sys.stderr)


def _config_error(exc: ConfigError) -> int:
    if isinstance(exc, PipelineConfigError):
        print(f"{PROG}: configuration error in {exc.path}:", file=sys.stderr)
        for line in exc.problems:
            print(f"  {_clean(line)}", file=sys.stderr)
    else:
        print(f"{PROG}: configuration error: {_clean(str(exc))}", file=sys.stderr)
    return EXIT_CONFIG


def setup_logging(level: str | None, display: ProgressDisplay | None) -> None:
    """INFO log lines on standard error; on a terminal with a live progress line, only
    warnings (printed above the line) unless ``level`` asks for more."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_hdfs_region", False):  # ours, from an earlier call
            root.removeHandler(old)
    live = display is not None and display.live and display.enabled
    handler: logging.Handler
    if display is not None and live:
        handler = LiveLineHandler(display)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    setattr(handler, "_hdfs_region", True)  # noqa: B010 - marks the handlers we own
    root.addHandler(handler)
    root.setLevel((level or ("WARNING" if live else "INFO")).upper())
    for noisy in ("py4j", "urllib3", "pyspark", "hdfs"):
        # urllib3's request lines and the hdfs client's line per call (INFO) only when DEBUG is
        # asked for (the WebHDFS backend scrubs the delegation token from both).
        quiet = noisy in ("py4j", "pyspark") or root.level > logging.DEBUG
        logging.getLogger(noisy).setLevel(logging.WARNING if quiet else logging.NOTSET)


def _summary(final: Progress) -> str:
    parts = [f"{format_count(final.records_in)} records in"]
    if final.records_out is not None:
        parts[0] += f", {format_count(final.records_out)} out"
    if final.files_in is not None and final.files_out is not None:
        parts.append(f"{final.files_in} files read, {final.files_out} published")
    parts.append(f"{final.cuts} cuts, {final.resets} resets in {final.elapsed:.1f}s")
    return f"{final.status}: " + ", ".join(parts)


# -- run ----------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = load_pipeline(args.config, engine=args.engine)
    except ConfigError as exc:
        return _config_error(exc)
    display = ProgressDisplay(sys.stderr, enabled=not args.no_progress)
    setup_logging(args.log_level, display)
    try:
        if config.engine == "local":
            from operators.engine_local import run_local

            final = run_local(config, available_now=args.available_now, display=display)
        else:
            from operators.engine_spark import run_spark

            final = run_spark(config, available_now=args.available_now, display=display)
    except ConfigError as exc:
        return _config_error(exc)
    except RegionError as exc:
        _error(str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        _error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    except ImportError as exc:  # a backend's optional client (requests-kerberos, libhdfs)
        _error(str(exc))
        return EXIT_FAILURE
    print(_summary(final), flush=True)
    return EXIT_OK


# -- inspect ------------------------------------------------------------------------------------

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
        return _clean(value)
    return value


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _readable(state: Any) -> Any:
    """``state`` with every scan cursor state shown as counts (its window and census are
    compressed), whatever operator nests it."""
    from operators.cursor import describe_state

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


def cmd_inspect(args: argparse.Namespace) -> int:
    from operators.engines import read_identity
    from operators.fs import open_path
    from region.lock import CheckpointLock

    target = args.target
    fs_settings = None
    if target.endswith(".toml") and os.path.isfile(target):
        try:
            config = load_pipeline(target)
        except ConfigError as exc:
            return _config_error(exc)
        fs_settings = config.filesystem
        target = config.region.checkpoint_dir
    fs, directory = open_path(target, fs_settings)
    out = sys.stdout
    print(f"checkpoint directory {fs.display(directory)}", file=out)
    try:
        identity = read_identity(fs, directory)
        holder = CheckpointLock(fs, directory).holder()
    except RegionError as exc:
        _error(str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        _error(f"cannot read checkpoint directory {fs.display(directory)}: {exc}")
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
        _error(f"cannot read checkpoint directory {fs.display(directory)}: {exc}")
        return EXIT_FAILURE


def _inspect_cuts(fs: FileSystem, directory: str, out: TextIO) -> int:
    """The local engine's region checkpoints."""
    from region.checkpoint import CheckpointStore

    infos = CheckpointStore(fs, directory).list()
    if not infos:
        if not fs.exists(directory):
            _error(f"no checkpoint directory {fs.display(directory)} (nothing has run there)")
            return EXIT_FAILURE
        print("no checkpoints (a run here starts from the beginning)", file=out)
        return EXIT_OK
    print(f"{len(infos)} cut(s), oldest first:", file=out)
    print(f"  {'cut':>6}  {'written':19}  {'bytes':>8}  status", file=out)
    for info in infos:
        status = "valid" if info.valid else f"NOT VALID: {info.reason}"
        print(
            f"  {info.cut_id:>6}  {_iso(info.created):19}  {info.size:>8}  {_clean(status)}",
            file=out,
        )
    valid = [i for i in infos if i.valid]
    if not valid:
        print("no valid cut: a run here fails unless start_fresh = true", file=out)
        return EXIT_FAILURE
    try:
        checkpoint = CheckpointStore(fs, directory, pipeline_id=valid[-1].pipeline_id).latest()
    except RegionError as exc:
        _error(str(exc))
        return EXIT_FAILURE
    if checkpoint is None:  # deleted meanwhile
        return EXIT_FAILURE
    print(f"newest valid cut {checkpoint.cut_id} ({_iso(checkpoint.created)})", file=out)
    print(f"  pipeline: {checkpoint.pipeline_id}", file=out)
    for key, value in sorted(checkpoint.meta.items()):
        print(f"  {key}: {_clean(str(value))}", file=out)
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
        try:
            log_fs, log_dir = open_path(sink_log, fs_settings)
            entry = json.loads(log_fs.read(f"{log_dir.rstrip('/')}/{batch:020d}.json"))
            state = {"state": entry.get("state"), "renames": len(entry.get("renames", []))}
        except (OSError, ValueError) as exc:
            state = {"unavailable": f"{type(exc).__name__}: {exc}"}
        _print_state("hdfs_sink", state, out)
    return EXIT_OK


# -- demo ---------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from operators.demo import run_demo

    setup_logging(args.log_level or "WARNING", None)
    try:
        ok = run_demo(
            Path(args.dir) if args.dir else None,
            engine=args.engine,
            files=args.files,
            lines=args.lines,
        )
    except ConfigError as exc:
        return _config_error(exc)
    except (RegionError, OSError, RuntimeError) as exc:
        _error(str(exc))
        return EXIT_FAILURE
    return EXIT_OK if ok else EXIT_FAILURE


# -- sandbox ------------------------------------------------------------------------------------


def cmd_sandbox(args: argparse.Namespace) -> int:
    import signal
    import subprocess
    import tempfile

    from operators.sandbox import SandboxError, SandboxSetupError, launcher_command

    setup_logging(args.log_level or "WARNING", None)
    temporary = args.dir is None
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="hdfs-sandbox-"))
    try:
        cmd = launcher_command(base, datanodes=args.datanodes, ha=args.ha)
    except SandboxSetupError as exc:
        _error(str(exc))
        return EXIT_CONFIG
    except SandboxError as exc:
        _error(str(exc))
        return EXIT_FAILURE
    print(
        f"{PROG}: starting a real HDFS in {base} (log: {base / 'sandbox.log'}); the first line "
        "on standard output is its URIs, Ctrl-C stops it",
        file=sys.stderr,
    )
    # The JVM shares stdin/stdout (ready line, fault commands); a signal to us is passed on so
    # that its shutdown hook stops the cluster cleanly.
    child = subprocess.Popen(cmd)
    forward = lambda signum, _frame: child.send_signal(signum)  # noqa: E731
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = child.wait()
    if temporary:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    # A JVM ended by SIGINT / SIGTERM exits 130 / 143 after its shutdown hooks: a clean stop.
    return EXIT_OK if code in (0, 130, 143, -signal.SIGINT, -signal.SIGTERM) else EXIT_FAILURE


# -- parser -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Move files from a landing directory to rolling output files, exactly once, in a "
            "checkpointed consistent region (on Spark or in-process)."
        ),
        epilog="Exit codes: 0 success, 1 runtime failure, 2 configuration error.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    log_level = {
        "metavar": "LEVEL",
        "help": "log level (default: INFO, or WARNING under a live progress line)",
    }

    run = sub.add_parser(
        "run",
        help="run a pipeline described by a TOML file",
        description=(
            "Run scan -> source -> transform -> sink from CONFIG. Ctrl-C or SIGTERM stop it "
            "gracefully (a final cut); running the same command again resumes from the "
            "checkpoint."
        ),
    )
    run.add_argument("config", metavar="CONFIG.toml")
    run.add_argument(
        "--engine", choices=ENGINES, help="override the file's engine (default: spark)"
    )
    run.add_argument(
        "--available-now",
        action="store_true",
        help="process every file present now, then stop with a final cut and exit 0",
    )
    run.add_argument("--no-progress", action="store_true", help="do not show progress")
    run.add_argument("--log-level", **log_level)  # type: ignore[arg-type]
    run.set_defaults(func=cmd_run)

    inspect = sub.add_parser(
        "inspect",
        help="list the cuts of a checkpoint directory and the newest operator states",
    )
    inspect.add_argument(
        "target", metavar="CHECKPOINT_DIR", help="a checkpoint directory (or a pipeline TOML)"
    )
    inspect.set_defaults(func=cmd_inspect)

    demo = sub.add_parser(
        "demo",
        help="crash a pipeline on purpose and prove every record arrived exactly once",
        description=(
            "Create sample landing files in DIR, run a pipeline, SIGKILL it in the middle, run "
            "the same command again to completion, and compare the output record by record."
        ),
    )
    demo.add_argument("dir", nargs="?", metavar="DIR", help="work directory (default: a new one)")
    demo.add_argument("--engine", choices=ENGINES, default="spark", help="default: spark")
    demo.add_argument("--files", type=int, default=8, help="landing files (default 8)")
    demo.add_argument("--lines", type=int, default=500, help="lines per file (default 500)")
    demo.add_argument("--log-level", **log_level)  # type: ignore[arg-type]
    demo.set_defaults(func=cmd_demo)

    sandbox = sub.add_parser(
        "sandbox",
        help="run a real HDFS on this machine (Hadoop's MiniDFSCluster; needs Java and Maven)",
        description=(
            "Start a NameNode and DataNodes in one JVM on ephemeral ports and run until Ctrl-C "
            "or SIGTERM. The first line on standard output is a JSON object with the hdfs:// "
            "and webhdfs:// URIs and the client configuration directory (for HADOOP_CONF_DIR). "
            "Commands on standard input: stop-datanode I, start-datanode I, restart-datanode I, "
            "restart-namenode, status. The first start resolves the classpath with Maven."
        ),
    )
    sandbox.add_argument(
        "dir", nargs="?", metavar="DIR", help="data, configuration and log (default: a new one)"
    )
    sandbox.add_argument("--datanodes", type=int, default=1, help="DataNodes (default 1)")
    sandbox.add_argument(
        "--ha", action="store_true", help="two NameNodes behind the name service hdfs://sandbox"
    )
    sandbox.add_argument("--log-level", **log_level)  # type: ignore[arg-type]
    sandbox.set_defaults(func=cmd_sandbox)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
