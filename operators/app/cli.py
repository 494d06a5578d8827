"""The ``hdfs-region`` command line: parse the arguments and dispatch to a command, mapping
its errors to an exit code at this edge.

Exit codes: :mod:`operators.app.exit_codes`, one table shown in every ``--help``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from operators.app.config import (
    DEFAULT_ENGINE,
    ENGINES,
    PipelineConfig,
    check_default_fs_input,
    load_pipeline,
)
from operators.app.console import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_PIPE,
    LOG_CONTEXT,
    PROG,
    command,
    config_error,
    error,
    setup_logging,
)
from operators.app.exit_codes import EXIT_SIGINT, epilog, fill_epilog
from operators.app.progress import ProgressDisplay, summary_line
from operators.app.stdout import StdoutClosed, guarded, silence
from region.errors import ConfigError, RegionError
from region.signals import held_until_exit, last_signal

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)


# -- run ----------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    # Logging first: reading the settings logs where the filesystem came from
    # (fs.defaultFS of HADOOP_CONF_DIR). JSON logs are for machines: no live line among them.
    display = ProgressDisplay(
        sys.stderr, enabled=not args.no_progress and args.log_format == "text"
    )
    setup_logging(args.log_level, display, args.log_format)
    try:
        config = load_pipeline(args.config, engine=args.engine)
    except ConfigError as exc:
        return config_error(exc)
    if args.metrics_port is not None:
        metrics = config.metrics.model_copy(update={"port": args.metrics_port})
        config = config.model_copy(update={"metrics": metrics})
    LOG_CONTEXT["pipeline"] = config.pipeline_id()
    # One named file ([source] file) is read, then the run ends, as IBM's source does.
    available_now = args.available_now or config.single_file is not None
    # A signal after the stop it asked for completed must not kill the process (exit 0).
    with held_until_exit():
        return _run(config, available_now, display)


def _run(config: PipelineConfig, available_now: bool, display: ProgressDisplay) -> int:
    from operators.app.yarn_cluster import is_cluster_submit, submit

    try:
        check_default_fs_input(config)
        if is_cluster_submit(config):
            return submit(config, available_now)
        if config.engine == "local":
            from operators.app.engine_local import run_local

            final = run_local(config, available_now=available_now, display=display)
        else:
            from operators.app.engine_spark import run_spark

            final = run_spark(config, available_now=available_now, display=display)
    except ConfigError as exc:
        return config_error(exc)
    except RegionError as exc:
        error(str(exc))
        return EXIT_FAILURE
    except (OSError, ValueError) as exc:  # ValueError: WebHDFS's IllegalArgumentException
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    except ImportError as exc:  # a backend's optional client (requests-gssapi, libhdfs)
        error(str(exc))
        return EXIT_FAILURE
    print(summary_line(final), flush=True)
    if not final.final_cut:
        signum = last_signal()
        return EXIT_FAILURE if signum is None else 128 + signum
    return EXIT_OK


# -- switch -------------------------------------------------------------------------------------


def cmd_switch(args: argparse.Namespace) -> int:
    from operators.app.switch import switch_directory

    setup_logging(args.log_level or "WARNING", None)
    if args.cancel:
        if args.directory is not None:
            error("--cancel takes no DIRECTORY: it removes the pending switch, whatever its own")
            return EXIT_CONFIG
        return _cancel_switch(args.config)
    if args.directory is None:
        error("give DIRECTORY (the directory to watch), or --cancel")
        return EXIT_CONFIG
    try:
        config = load_pipeline(args.config)
        switch = switch_directory(config, args.directory)
    except ConfigError as exc:
        return config_error(exc)
    except OSError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    if not switch.exists:
        print(
            f"{PROG}: warning: {switch.shown} does not exist yet: the scan finds it empty until "
            "it appears",
            file=sys.stderr,
        )
    if switch.running is None:
        print(
            f"switch to {switch.shown} is pending: no job runs on these checkpoints; the next "
            f"start ({command('run', args.config)}) applies it",
            flush=True,
        )
        return EXIT_PENDING
    print(
        f"switch to {switch.shown} requested: the running job, {switch.running}, applies it "
        "once it has finished the file it is reading (its log says 'now watching')",
        flush=True,
    )
    return EXIT_OK


def _cancel_switch(config_path: str) -> int:
    from operators.app.switch import cancel_switch

    try:
        cancel = cancel_switch(load_pipeline(config_path))
    except ConfigError as exc:
        return config_error(exc)
    except OSError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    request = cancel.request
    if request is None:
        print(f"no switch request in {cancel.control}: nothing to cancel", flush=True)
        return EXIT_OK
    if cancel.running is not None:
        error(
            f"the running job, {cancel.running}, applies the switch to {cancel.directory} "
            "within a second of it: nothing cancelled; to go back, switch to the directory "
            "it watched before"
        )
        return EXIT_FAILURE
    if cancel.applied_by is not None:
        print(
            f"no pending switch: the switch to {cancel.directory} was applied and cut "
            f"{cancel.applied_by} records it; to go back, switch to the directory watched "
            "before",
            flush=True,
        )
        return EXIT_OK
    print(
        f"cancelled the pending switch to {cancel.directory} (removed {cancel.control})",
        flush=True,
    )
    return EXIT_OK


# -- inspect ------------------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    from operators.app.inspect import inspect

    setup_logging(args.log_level or "WARNING", None)
    return inspect(args.target)


# -- copy ---------------------------------------------------------------------------------------


def cmd_copy(args: argparse.Namespace) -> int:
    from operators.app.copy_command import run_copy

    setup_logging(args.log_level or "WARNING", None)
    return run_copy(
        args.src,
        args.dst,
        delete_source=args.delete_source,
        overwrite=args.overwrite,
        config=args.config,
        chunk_size=args.chunk_size,
    )


# -- demo ---------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from operators.app.demo import run_demo

    setup_logging(args.log_level or "WARNING", None)
    try:
        ok = run_demo(
            Path(args.dir) if args.dir else None,
            engine=args.engine,
            files=args.files,
            lines=args.lines,
        )
    except ConfigError as exc:
        return config_error(exc)
    except (RegionError, OSError, RuntimeError) as exc:
        error(str(exc))
        return EXIT_FAILURE
    return EXIT_OK if ok else EXIT_FAILURE


# -- sandbox ------------------------------------------------------------------------------------


def cmd_sandbox(args: argparse.Namespace) -> int:
    import subprocess
    import tempfile

    from operators.sandbox import SandboxError, SandboxSetupError, launcher_command

    setup_logging(args.log_level or "WARNING", None)
    if args.nodemanagers is not None and not args.yarn:
        error("--nodemanagers needs --yarn")
        return EXIT_CONFIG
    temporary = args.dir is None
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="hdfs-sandbox-"))
    try:
        cmd = launcher_command(
            base,
            datanodes=args.datanodes,
            ha=args.ha,
            secure=args.secure,
            token_lifetime=args.token_lifetime,
            block_size=args.block_size,
            nodemanagers=(args.nodemanagers or 1) if args.yarn else 0,
            dead_after=args.dead_after,
        )
    except ValueError as exc:
        error(str(exc))
        return EXIT_CONFIG
    except SandboxSetupError as exc:
        error(str(exc))
        return EXIT_CONFIG
    except SandboxError as exc:
        error(str(exc))
        return EXIT_FAILURE
    print(
        f"{PROG}: starting a real HDFS in {base} (log: {base / 'sandbox.log'}); the first line "
        "on standard output is its URIs, Ctrl-C stops it",
        file=sys.stderr,
    )
    # The JVM shares stdin/stdout (ready line, fault commands); a signal to us is passed on so
    # that its shutdown hook stops the cluster cleanly.
    child = subprocess.Popen(cmd, cwd=base)
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


# -- init ---------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from operators.app.init_command import init_pipeline

    setup_logging(args.log_level or "WARNING", None)
    try:
        path = init_pipeline(
            Path(args.dir),
            landing=args.landing,
            output=args.output,
            engine=args.engine,
            force=args.force,
        )
    except ConfigError as exc:
        return config_error(exc)
    except OSError as exc:
        error(str(exc))
        return EXIT_CONFIG if isinstance(exc, FileExistsError) else EXIT_FAILURE
    print(f"wrote {path} (it loads); land files in its [scan] directory, then run:")
    print(f"  {command('run', str(path), '--available-now')}")
    return EXIT_OK


#: The distribution's name (``[project] name`` in pyproject.toml), whose metadata holds the release.
DISTRIBUTION = "hdfs-region"


def _version() -> str:
    """The installed release of this distribution (its metadata: a wheel's, or an editable
    install's, as pyproject.toml set it when installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # the packages imported from a tree that was never installed
        return "unknown (not installed)"


#: The levels --log-level takes (any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: str) -> str:
    """An argparse type: a level name of :data:`LOG_LEVELS`, upper-cased (a wrong one is a
    usage error, exit 2, not a traceback from logging)."""
    level = text.upper()
    if level not in LOG_LEVELS:
        msg = f"invalid level {text!r} (choose from {', '.join(LOG_LEVELS)}, in any case)"
        raise argparse.ArgumentTypeError(msg)
    return level


def _add_log_level(command: argparse.ArgumentParser, default: str = "WARNING") -> None:
    """``--log-level``, the same on every subcommand."""
    command.add_argument(
        "--log-level",
        type=_log_level,
        metavar="LEVEL",
        help=f"log level: {', '.join(LOG_LEVELS)} (default: {default})",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, with the exit codes of an epilog one under the other."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.indent(fill_epilog(text, width - len(indent)), indent)


class _Parser(argparse.ArgumentParser):
    """Every parser of the command, its subcommands' too, formats help the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Move files from a landing directory to rolling output files, exactly once, in a "
            "checkpointed consistent region (on Spark or in-process)."
        ),
        epilog=epilog(),
    )
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {_version()}", help="print the release"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    run = sub.add_parser(
        "run",
        help="run a pipeline described by a TOML file",
        description=(
            "Run scan -> source -> transform -> sink from CONFIG. Ctrl-C or SIGTERM stop it "
            "gracefully (a final cut); running the same command again resumes from the "
            "checkpoint."
        ),
        epilog=epilog("run"),
    )
    run.add_argument("config", metavar="CONFIG.toml")
    run.add_argument(
        "--engine",
        choices=ENGINES,
        help=f"override the file's engine key; a file without one runs on {DEFAULT_ENGINE} (the "
        "default, kept so that a job never changes engines on an upgrade: its checkpoints "
        "belong to the engine that wrote them)",
    )
    run.add_argument(
        "--available-now",
        action="store_true",
        help="process every file present now, then stop with a final cut and exit 0",
    )
    run.add_argument("--no-progress", action="store_true", help="do not show progress")
    _add_log_level(run, "INFO, or WARNING under a live progress line")
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one object per line (time, level, logger, message, pipeline, cut)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics, /healthz and /readyz on PORT ([metrics] port; 0: any free port)",
    )
    run.set_defaults(func=cmd_run)

    switch = sub.add_parser(
        "switch",
        help="make a running job (local engine) watch another directory, or list its own now",
        description=(
            "Hand the scan of the job of CONFIG a new directory through a control file in its "
            "checkpoint directory: applied under a permit and recorded by the next cut, so a "
            "restart keeps it. The directory it already watches is listed again at once. "
            "A relative DIRECTORY is taken from CONFIG's folder, as CONFIG's own paths are; it "
            "must be a directory or not exist yet (CONFIG.toml itself is refused). [scan] "
            "roots limit where it may switch. --cancel removes a pending switch."
        ),
        epilog=epilog("switch"),
    )
    switch.add_argument("config", metavar="CONFIG.toml")
    switch.add_argument("directory", nargs="?", metavar="DIRECTORY")
    switch.add_argument(
        "--cancel",
        action="store_true",
        help="remove the pending switch (one no job has applied yet) instead, and say which; "
        "with none, say so",
    )
    _add_log_level(switch)
    switch.set_defaults(func=cmd_switch)

    inspect = sub.add_parser(
        "inspect",
        help="list the cuts of a checkpoint directory and the newest operator states",
        description=(
            "Print what a checkpoint directory holds: who holds its lock, its cuts (for the "
            "spark engine its micro-batches), each valid or why not, and the operators' state "
            "in the newest valid cut, as the next start restores it. Given a pipeline TOML, its "
            "[region] checkpoint_dir is read. Exit 1 when there is no checkpoint directory or "
            "no valid cut."
        ),
        epilog=epilog("inspect"),
    )
    inspect.add_argument(
        "target", metavar="CHECKPOINT_DIR", help="a checkpoint directory (or a pipeline TOML)"
    )
    _add_log_level(inspect)
    inspect.set_defaults(func=cmd_inspect)

    copy = sub.add_parser(
        "copy",
        help="copy one file between the local disk and HDFS, whole or not at all",
        description=(
            "Copy SRC to DST (HDFS2FileCopy). A plain path is on the local disk; a URI "
            "(hdfs://nn:8020/x, webhdfs://nn:9870/x) names a filesystem, reached with the "
            "[filesystem] table of --config. DST ending in '/' or naming a directory receives "
            "SRC's name. The destination appears whole or not at all; running the command "
            "again after a crash finishes the copy. Prints '<size> bytes successfully copied "
            "from SRC to DST', ending with DST's URI."
        ),
        epilog=epilog("copy"),
    )
    copy.add_argument("src", metavar="SRC")
    copy.add_argument("dst", metavar="DST")
    copy.add_argument(
        "--delete-source",
        action="store_true",
        help="delete SRC once DST is durable (IBM: deleteSourceFile)",
    )
    copy.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a DST holding other content (IBM: overwriteDestinationFile); without it "
        "that is an error, and a DST already holding SRC's content is success",
    )
    copy.add_argument(
        "--config",
        metavar="SETTINGS.toml",
        help="a settings file whose [filesystem] table reaches the remote side",
    )
    copy.add_argument(
        "--chunk-size", type=int, metavar="BYTES", help="bytes per request (default 4 MiB)"
    )
    _add_log_level(copy)
    copy.set_defaults(func=cmd_copy)

    init = sub.add_parser(
        "init",
        help="write a commented pipeline.toml for a landing directory and an output",
        description=(
            "Write DIR/pipeline.toml (default: the current directory) reading --landing into "
            "--output (local paths, relative to DIR, or hdfs:// and webhdfs:// URIs), check "
            "that it loads, and print the command that runs it."
        ),
        epilog=epilog("init"),
    )
    init.add_argument("dir", nargs="?", default=".", metavar="DIR")
    init.add_argument("--landing", default="landing", help="directory watched (default landing)")
    init.add_argument("--output", default="curated", help="output directory (default curated)")
    init.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="the engine written into the file (default: local: no JVM, starts in about a "
        "second, the same guarantees; spark for [transform] sql, a YARN cluster or a job "
        f"spread over executors). A file without the key runs on {DEFAULT_ENGINE}",
    )
    init.add_argument("--force", action="store_true", help="replace an existing pipeline.toml")
    _add_log_level(init)
    init.set_defaults(func=cmd_init)

    demo = sub.add_parser(
        "demo",
        help="crash a pipeline on purpose and prove every record arrived exactly once",
        description=(
            "Create sample landing files in DIR, run a pipeline, SIGKILL it in the middle, run "
            "the same command again to completion, and compare the output record by record."
        ),
        epilog=epilog("demo"),
    )
    demo.add_argument("dir", nargs="?", metavar="DIR", help="work directory (default: a new one)")
    demo.add_argument("--engine", choices=ENGINES, default="spark", help="default: spark")
    demo.add_argument("--files", type=int, default=8, help="landing files (default 8)")
    demo.add_argument("--lines", type=int, default=500, help="lines per file (default 500)")
    _add_log_level(demo)
    demo.set_defaults(func=cmd_demo)

    sandbox = sub.add_parser(
        "sandbox",
        help="run a real HDFS on this machine (Hadoop's MiniDFSCluster; needs Java and Maven)",
        description=(
            "Start a NameNode and DataNodes in one JVM on ephemeral ports and run until Ctrl-C "
            "or SIGTERM. The first line on standard output is a JSON object with the hdfs:// "
            "and webhdfs:// URIs and the client configuration directory (for HADOOP_CONF_DIR). "
            "Commands on standard input: stop-datanode I, start-datanode I, restart-datanode I, "
            "pause-ibr I, resume-ibr I (hold, then send, its reports of new replicas), "
            "restart-namenode, status; with --yarn: stop-nodemanager I, start-nodemanager I. The "
            "first start resolves the classpath with Maven."
        ),
        epilog=epilog("sandbox"),
    )
    sandbox.add_argument(
        "dir", nargs="?", metavar="DIR", help="data, configuration and log (default: a new one)"
    )
    sandbox.add_argument("--datanodes", type=int, default=1, help="DataNodes (default 1)")
    sandbox.add_argument(
        "--ha", action="store_true", help="two NameNodes behind the name service hdfs://sandbox"
    )
    sandbox.add_argument(
        "--secure",
        action="store_true",
        help="with a Kerberos KDC: Kerberos RPC, SASL data transfer and HTTPS-only WebHDFS, "
        "and with --yarn a Kerberized ResourceManager and NodeManagers (the JSON line adds "
        "realm, krb5_conf, principal, keytab and ca_file)",
    )
    sandbox.add_argument(
        "--token-lifetime",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --secure: the longest life of a delegation token (default: Hadoop's 7 days)",
    )
    sandbox.add_argument(
        "--block-size",
        type=int,
        default=1 << 20,
        metavar="BYTES",
        help="the cluster's and its clients' block size (default 1048576, HDFS's smallest; "
        "production clusters use 134217728)",
    )
    sandbox.add_argument(
        "--dead-after",
        type=float,
        default=16.0,
        metavar="SECONDS",
        help="how long the NameNode counts a silent DataNode as live (default 16, at least 12; "
        "a production NameNode's is 630)",
    )
    sandbox.add_argument(
        "--yarn",
        action="store_true",
        help="YARN too: a ResourceManager and NodeManagers (Hadoop's MiniYARNCluster); the JSON "
        "line adds yarn (the ResourceManager's address), conf_dir gets a yarn-site.xml",
    )
    sandbox.add_argument(
        "--nodemanagers",
        type=int,
        default=None,
        metavar="N",
        help="with --yarn: NodeManagers, 3 GiB each (default 1)",
    )
    _add_log_level(sandbox)
    sandbox.set_defaults(func=cmd_sandbox)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A reader that stops early (`| head`) ends any command quietly, help included: never a
    # traceback, nor a failure of the command's own work.
    try:
        with guarded():
            try:
                return _main(argv)
            finally:
                # What is still buffered (a pipe's stdout is block-buffered) is written here,
                # guarded, not by the interpreter's flush at exit (which exits 120 on a closed
                # pipe); `--help`'s SystemExit passes through here too.
                sys.stdout.flush()
    except StdoutClosed:
        silence()
        return EXIT_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from operators.app.yarn_cluster import record_result

    try:
        # In a YARN application master: the exit code and errors reach the submitter too.
        code: int = record_result(lambda: args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    return code


if __name__ == "__main__":
    sys.exit(main())
