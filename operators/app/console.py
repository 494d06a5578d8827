"""What the command says on standard error: its exit codes, error lines (scrubbed of secrets)
and the logging setup, shared by every command."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from operators.app.config import PipelineConfigError
from operators.app.progress import LiveLineHandler, ProgressDisplay
from operators.fs.errors import scrub
from region.errors import ConfigError

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_PENDING",
    "PROG",
    "clean",
    "config_error",
    "error",
    "setup_logging",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
#: ``switch`` with no job running: the request is written and waits for the next start.
EXIT_PENDING = 3

PROG = "hdfs-region"


def clean(text: str) -> str:
    """``text`` without secrets: tokens travel in URL query strings and passwords in
    user:pass@, so neither is ever printed."""
    return scrub(text) if "://" in text else text


def error(message: str, stream: TextIO | None = None) -> None:
    print(f"{PROG}: error: {clean(message)}", file=stream or sys.stderr)


def config_error(exc: ConfigError) -> int:
    """Print a configuration error (one line per bad key) and return its exit code."""
    if isinstance(exc, PipelineConfigError):
        print(f"{PROG}: configuration error in {exc.path}:", file=sys.stderr)
        for line in exc.problems:
            print(f"  {clean(line)}", file=sys.stderr)
    else:
        print(f"{PROG}: configuration error: {clean(str(exc))}", file=sys.stderr)
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
