"""Log setup of the ``hdfs-region`` command: third-party clients are quiet unless DEBUG is asked."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.app.console import LOG_CONTEXT, setup_logging
from tests.cli.conftest import cli

CLIENTS = ["py4j", "urllib3", "pyspark", "hdfs"]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    names = ["", *CLIENTS]
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in names}
    yield
    for name, (level, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers


def test_the_webhdfs_clients_info_lines_are_hidden_unless_debug(restore_logging: None) -> None:
    setup_logging(None, None)
    client = logging.getLogger("hdfs.client")  # logs "Reading file ..." at INFO, per call
    assert not client.isEnabledFor(logging.INFO) and client.isEnabledFor(logging.WARNING)
    assert logging.getLogger("operators.scan.operator").isEnabledFor(logging.INFO)
    setup_logging("DEBUG", None)
    assert client.isEnabledFor(logging.DEBUG)
    assert logging.getLogger("urllib3.connectionpool").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("py4j").isEnabledFor(logging.INFO)


def test_json_logs_are_one_object_per_line_with_the_pipeline_and_the_cut_secrets_masked(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = dict(LOG_CONTEXT)
    LOG_CONTEXT.update(pipeline="orders", cut=lambda: 7)
    try:
        setup_logging("DEBUG", None, "json")
        logging.getLogger("operators.fs.webhdfs").warning(
            "retrying %s", "https://alice:hunter2@nn:9871/webhdfs/v1/in?op=OPEN&delegation=TOK3N"
        )
        try:
            raise OSError("GET /webhdfs/v1/x?op=OPEN&delegation=TOK3N failed")
        except OSError:
            logging.getLogger("urllib3.connectionpool").debug("request failed", exc_info=True)
    finally:
        LOG_CONTEXT.clear()
        LOG_CONTEXT.update(saved)
    err = capsys.readouterr().err
    assert "hunter2" not in err and "TOK3N" not in err
    first, second = (json.loads(line) for line in err.splitlines())
    assert first["level"] == "WARNING" and first["logger"] == "operators.fs.webhdfs"
    assert first["message"].startswith("retrying https://nn:9871/webhdfs/v1/in?op=OPEN")
    assert (first["pipeline"], first["cut"]) == ("orders", 7)
    assert first["time"].endswith("+00:00")
    assert "OSError: GET /webhdfs/v1/x?op=OPEN" in second["exception"]


FAILING = """\
engine = "{engine}"
[region]
max_consecutive_reset_attempts = 1
reset_backoff = "10ms"
[scan]
directory = "landing"
[transform]
function = "failing:check"
[sink]
file = "out/part-%FILENUM.txt"
[spark]
master = "local[1]"
"""

FAILING_TRANSFORM = """\
def check(value):
    if value == "3":
        raise ValueError("line one\\nline two \\x00 end")
    return value
"""


def _failing_run(tmp_path: Path, engine: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.txt").write_text("1\n2\n3\n4\n")
    (tmp_path / "failing.py").write_text(FAILING_TRANSFORM)
    (tmp_path / "pipeline.toml").write_text(FAILING.format(engine=engine))
    return cli(
        "run", str(tmp_path / "pipeline.toml"), "--available-now", "--no-progress", *args,
        cwd=tmp_path, timeout=300, PYTHONPATH=str(tmp_path),
    )  # fmt: skip


@pytest.mark.parametrize(
    "engine", ["local", pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]
)
def test_with_json_logs_every_line_of_a_failed_run_is_one_object_with_the_users_traceback(
    tmp_path: Path, engine: str
) -> None:
    """A transform raising ``ValueError("line one\\nline two \\x00 end")``: every physical line
    of standard error parses as JSON, the final error line included (it was plain text, split
    by the message's newline), NUL escaped; and the traceback, with the user's own file and
    line, is in an ``exception`` field (only the message was logged)."""
    done = _failing_run(tmp_path, engine, "--log-format", "json")
    assert done.returncode == 1
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert "\x00" not in done.stderr
    final = lines[-1]
    assert final["level"] == "ERROR" and final["logger"] == "hdfs-region"
    assert "ValueError: line one" in final["message"]
    traced = [line["exception"] for line in lines if "exception" in line]
    assert traced and any(
        f'{tmp_path / "failing.py"}", line 3, in check' in text for text in traced
    ), traced


def test_a_failing_transform_is_logged_with_its_traceback_once_in_text(tmp_path: Path) -> None:
    done = _failing_run(tmp_path, "local")
    assert done.returncode == 1
    assert done.stderr.count(f'{tmp_path / "failing.py"}", line 3, in check') == 1
    assert done.stderr.splitlines()[-2].startswith("hdfs-region: error: ")
