"""Both HDFS clients turn the NameNode's Java exceptions into the same built-ins, naming the path.

The errors are built as each client delivers them (WebHDFS: a ``RemoteException`` with its
``exception`` field; hdfs-native: an ``RPCError("<class>", "<message>")`` text), so no cluster
is needed; the backend tests see the same mapping against real NameNodes.
"""

from __future__ import annotations

import errno

import pytest
from hdfs.util import HdfsError

from operators.fs.native import NativeHdfsFileSystem
from operators.fs.webhdfs import WebHdfsFileSystem

CASES = [
    ("FileNotFoundException", FileNotFoundError, errno.ENOENT),
    ("FileAlreadyExistsException", FileExistsError, errno.EEXIST),
    ("AccessControlException", PermissionError, errno.EACCES),
    ("SecurityException", PermissionError, errno.EACCES),
    ("AuthorizationException", PermissionError, errno.EACCES),
    ("AlreadyBeingCreatedException", BlockingIOError, errno.EWOULDBLOCK),
    ("RecoveryInProgressException", BlockingIOError, errno.EWOULDBLOCK),
    ("ParentNotDirectoryException", NotADirectoryError, errno.ENOTDIR),
    ("PathIsNotEmptyDirectoryException", OSError, errno.ENOTEMPTY),
]


def webhdfs_error(java_class: str, message: str) -> Exception:
    fs = WebHdfsFileSystem("webhdfs://nn.example:9870")
    return fs._error(HdfsError(message, exception=java_class), "CREATE", "/landing/a.txt")


def native_error(java_class: str, message: str) -> Exception:
    fs = NativeHdfsFileSystem("hdfs://nn.example:8020", client=object())
    raised = RuntimeError(f'RPCError("org.apache.hadoop.x.{java_class}", "{message}\\n\\tat ...")')
    return fs._error(raised, "CREATE", "/landing/a.txt")


@pytest.mark.parametrize(("java_class", "kind", "code"), CASES)
@pytest.mark.parametrize("client", [webhdfs_error, native_error], ids=["webhdfs", "hdfs"])
def test_each_java_exception_becomes_the_same_builtin_naming_the_path(
    client: object, java_class: str, kind: type[OSError], code: int
) -> None:
    error = client(java_class, "refused by the NameNode")  # type: ignore[operator]
    assert type(error) is kind
    assert isinstance(error, OSError) and error.errno == code
    assert error.filename.endswith("nn.example:9870/landing/a.txt") or error.filename.endswith(
        "nn.example:8020/landing/a.txt"
    )
    assert "CREATE" in str(error) and "refused by the NameNode" in str(error)


def test_a_refused_parameter_is_a_value_error_on_webhdfs_and_einval_on_hdfs() -> None:
    # WebHDFS: a request we built wrong; hdfs://: the client's own argument check.
    assert isinstance(webhdfs_error("IllegalArgumentException", "bad offset"), ValueError)
    native = native_error("HadoopIllegalArgumentException", "bad offset")
    assert type(native) is OSError and native.errno == errno.EINVAL


def test_an_unknown_class_is_an_io_error_that_keeps_its_name() -> None:
    error = webhdfs_error("QuotaExceededException", "quota of /landing exceeded")
    assert type(error) is OSError and error.errno == errno.EIO
    assert "QuotaExceededException" in str(error)
    assert type(native_error("QuotaExceededException", "quota exceeded")) is OSError
