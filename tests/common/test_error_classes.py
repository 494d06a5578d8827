"""Which errors a reset can repair: one rule for both engines (the local controller sees the
exception, the Spark supervisor only its class name in the task's traceback)."""

from __future__ import annotations

import errno

import pytest

from operators.common.errors import BadRecordError, OperatorError
from operators.scan.cursor import LateFileError, ModifiedFileError
from region.errors import (
    ConfigError,
    LockLostError,
    is_permanent,
    is_permanent_name,
    permanent,
)

PERMANENT = [
    PermissionError(errno.EACCES, "Permission denied", "/out"),
    NotADirectoryError(errno.ENOTDIR, "not a directory", "/out/a/b"),
    IsADirectoryError(errno.EISDIR, "is a directory", "/in/sub"),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    ConfigError("bad value"),
    BadRecordError("line at byte offset 2 is not valid utf-8", file="/in/a", offset=2),
    LateFileError("a.txt would be passed over"),
    ModifiedFileError("a.txt changed after it was read"),
]
TRANSIENT = [
    ConnectionError("connection refused"),
    TimeoutError("DataNode did not answer"),
    BlockingIOError(errno.EWOULDBLOCK, "lease held by another client", "/out/p"),
    OSError(errno.EIO, "I/O error", "/out/p"),
    FileNotFoundError(errno.ENOENT, "gone", "/in/a.txt"),
    FileExistsError(errno.EEXIST, "exists", "/out/.p.inprogress"),
    OperatorError("something else"),
    RuntimeError("a bug"),
]


@pytest.mark.parametrize("error", PERMANENT, ids=lambda e: type(e).__name__)
def test_errors_no_retry_can_repair_are_permanent(error: BaseException) -> None:
    assert is_permanent(error)
    assert is_permanent_name(type(error).__name__)
    assert is_permanent_name(f"{type(error).__module__}.{type(error).__name__}")


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_errors_that_may_pass_are_retried(error: BaseException) -> None:
    assert not is_permanent(error)
    assert not is_permanent_name(type(error).__name__)


def test_a_mark_on_the_instance_decides_but_does_not_cross_a_process() -> None:
    exists = permanent(FileExistsError(errno.EEXIST, "p.txt exists, never overwritten", "/out"))
    assert is_permanent(exists)
    assert not is_permanent(FileExistsError(errno.EEXIST, "other", "/out"))
    # Known only by name (a Spark task's traceback), it is retried: never wrongly given up on.
    assert not is_permanent_name("FileExistsError")
    # A class can opt out of its base's rule.
    lost = LockLostError("taken over")
    lost.permanent = False  # type: ignore[attr-defined]
    assert not is_permanent(lost)


def test_unknown_names_are_transient() -> None:
    assert not is_permanent_name("StreamingQueryException")
    assert not is_permanent_name("org.apache.spark.SparkException")
    assert not is_permanent_name("")
