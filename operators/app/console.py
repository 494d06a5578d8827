"""What the command says on standard error: its error lines (scrubbed of secrets) and the
logging setup, shared by every command; the exit codes are :mod:`operators.app.exit_codes`'s."""

from __future__ import annotations

import datetime
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from typing import Any, TextIO

from operators.app.config import PipelineConfigError
from operators.app.exit_codes import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_PIPE,
)
from operators.app.progress import LiveLineHandler, ProgressDisplay
from operators.fs.errors import scrub, scrub_secrets
from region.errors import ConfigError

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_PENDING",
    "EXIT_PIPE",
    "LOG_CONTEXT",
    "PROG",
    "JsonFormatter",
    "clean",
    "command",
    "config_error",
    "error",
    "log_format",
    "setup_logging",
]


PROG = "hdfs-region"


def _as_typed(path: str, *, same: Callable[[str, str], bool]) -> str:
    """``path`` as a shell in the current directory runs it: its bare name when PATH finds
    that very file, else relative to the current directory when it is under it, else absolute."""
    name = os.path.basename(path)
    found = shutil.which(name)
    if found is not None and same(found, path):
        return name
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, os.getcwd())
    if relative != os.curdir and not relative.startswith(os.pardir + os.sep):
        return relative if os.sep in relative else os.curdir + os.sep + relative
    return absolute


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _same_path(a: str, b: str) -> bool:
    # Not samefile: a virtual environment's python is a link to the system's, which has not its
    # packages; only the very path runs with them.
    return os.path.abspath(a) == os.path.abspath(b)


def command(*args: str) -> str:
    """The ``hdfs-region`` command with ``args``, as the user can type it here: ``hdfs-region``
    when PATH finds the running script, else the script's path (``.venv/bin/hdfs-region`` after
    an install into a virtual environment that is not activated), or ``python -m operators.app``
    when the package runs as a module. Each argument is quoted for a POSIX shell."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    script = sys.argv[0] if sys.argv else ""
    if spec is not None and spec.name.startswith("operators.app."):
        python = _as_typed(sys.executable, same=_same_path)
        head = f"{shlex.quote(python)} -m {spec.name.removesuffix('.__main__')}"
    elif os.path.basename(script) == PROG and os.path.isfile(script):
        head = shlex.quote(_as_typed(script, same=_same_file))
    else:  # called from Python (the API, a test): the installed command's name
        head = PROG
    return " ".join([head, *(shlex.quote(arg) for arg in args)])


def clean(text: str) -> str:
    """``text`` without secrets: tokens travel in URL query strings and passwords in
    user:pass@, so neither is ever printed."""
    return scrub(text) if "://" in text else text


#: The format ``setup_logging`` chose: with ``"json"`` the command's own error lines are JSON
#: objects too, so that every line of standard error parses.
_FORMAT = {"log": "text"}


def log_format() -> str:
    """``"text"`` or ``"json"``: what ``setup_logging`` chose."""
    return _FORMAT["log"]


def _json_line(message: str, stream: TextIO | None, **extra: Any) -> None:
    record = logging.LogRecord(PROG, logging.ERROR, "", 0, message, None, None)
    line = json.loads(JsonFormatter().format(record))
    print(json.dumps({**line, **extra}, ensure_ascii=False), file=stream or sys.stderr)


def error(message: str, stream: TextIO | None = None) -> None:
    if _FORMAT["log"] == "json":
        _json_line(clean(message), stream)
        return
    print(f"{PROG}: error: {clean(message)}", file=stream or sys.stderr)


def config_error(exc: ConfigError) -> int:
    """Print a configuration error (one line per bad key) and return its exit code."""
    if _FORMAT["log"] == "json":
        if isinstance(exc, PipelineConfigError):
            problems = [clean(line) for line in exc.problems]
            text = f"configuration error in {exc.path}: " + "; ".join(problems)
            _json_line(text, None, path=str(exc.path), problems=problems)
        else:
            _json_line(f"configuration error: {clean(str(exc))}", None)
        return EXIT_CONFIG
    if isinstance(exc, PipelineConfigError):
        print(f"{PROG}: configuration error in {exc.path}:", file=sys.stderr)
        for line in exc.problems:
            print(f"  {clean(line)}", file=sys.stderr)
    else:
        print(f"{PROG}: configuration error: {clean(str(exc))}", file=sys.stderr)
    return EXIT_CONFIG


#: What every JSON log line adds: the pipeline id, and the newest completed cut (a callable the
#: engine sets once its region exists; read per line, so it must only read a counter).
LOG_CONTEXT: dict[str, Any] = {"pipeline": None, "cut": None}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: the text line's fields (time, level, logger, message, and
    the exception's text) plus ``pipeline`` and ``cut``. Secrets are masked as in the text
    format, here again on the final text (a handler's filter may not have run)."""

    def format(self, record: logging.LogRecord) -> str:
        cut: Callable[[], int | None] | None = LOG_CONTEXT.get("cut")
        try:
            cut_id = cut() if cut is not None else None
        except Exception:
            cut_id = None
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub_secrets(record.getMessage()),
            "pipeline": LOG_CONTEXT.get("pipeline"),
            "cut": cut_id,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = scrub_secrets(record.exc_text)
        return json.dumps(line, ensure_ascii=False)


def setup_logging(
    level: str | None, display: ProgressDisplay | None, log_format: str = "text"
) -> None:
    """INFO log lines on standard error; on a terminal with a live progress line, only
    warnings (printed above the line) unless ``level`` asks for more."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_hdfs_region", False):  # ours, from an earlier call
            root.removeHandler(old)
    live = display is not None and display.live and display.enabled and log_format == "text"
    _FORMAT["log"] = log_format
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    elif display is not None and live:
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
