"""Log setup of the ``hdfs-region`` command: third-party clients are quiet unless DEBUG is asked."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from operators.app.console import LOG_CONTEXT, setup_logging

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
    assert logging.getLogger("operators.scan").isEnabledFor(logging.INFO)
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
