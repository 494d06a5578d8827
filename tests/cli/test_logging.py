"""Log setup of the ``hdfs-region`` command: third-party clients are quiet unless DEBUG is asked."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from operators.app.console import setup_logging

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
