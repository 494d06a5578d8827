"""The WebHDFS stand-in's error answers: RemoteException JSON with Hadoop's exception names and
Java classes, and the query parameters refused as Hadoop's parameter parsing refuses them.

Every part of the stand-in raises :class:`RemoteError`; the request's router
(:mod:`operators.testing.webhdfs_standin`) turns it into the answer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RemoteError", "bad_param", "long_param", "not_found"]

_JAVA_CLASSES = {
    "FileNotFoundException": "java.io.FileNotFoundException",
    "IOException": "java.io.IOException",
    "EOFException": "java.io.EOFException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
    "UnsupportedOperationException": "java.lang.UnsupportedOperationException",
    "HadoopIllegalArgumentException": "org.apache.hadoop.HadoopIllegalArgumentException",
    "AccessControlException": "org.apache.hadoop.security.AccessControlException",
    "FileAlreadyExistsException": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "ParentNotDirectoryException": "org.apache.hadoop.fs.ParentNotDirectoryException",
    "PathIsNotEmptyDirectoryException": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "AlreadyBeingCreatedException": (
        "org.apache.hadoop.hdfs.protocol.AlreadyBeingCreatedException"
    ),
    "RecoveryInProgressException": ("org.apache.hadoop.hdfs.protocol.RecoveryInProgressException"),
}


class RemoteError(Exception):
    """An error answered as RemoteException JSON."""

    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "RemoteException": {
                "exception": self.exception,
                "javaClassName": _JAVA_CLASSES.get(self.exception, "java.io.IOException"),
                "message": self.message,
            }
        }


def not_found(message: str) -> RemoteError:
    return RemoteError(404, "FileNotFoundException", message)


def bad_param(name: str, reason: str) -> RemoteError:
    msg = f'Invalid value for webhdfs parameter "{name}": {reason}'
    return RemoteError(400, "IllegalArgumentException", msg)


def long_param(params: dict[str, str], name: str, default: int | None) -> int | None:
    """A non-negative integer parameter, refused as Hadoop's parameter parsing does."""
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad_param(name, f'Failed to parse "{text}" as a radix-10 long integer.') from None
    if value < 0:
        raise bad_param(name, f"Invalid parameter range: {name} = {value} < 0")
    return value
