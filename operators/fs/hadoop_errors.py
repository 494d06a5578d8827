"""Hadoop's Java exceptions as Python built-ins: one table for both HDFS clients.

The NameNode names the class of what went wrong: WebHDFS in the ``exception`` field of its
``RemoteException``, hdfs-native in the text of its RPC error. Both backends map that class
here; what each adds is only what its client says differently (hdfs-native's own Python
exceptions and texts without a class name, WebHDFS's texts that refine a class).
"""

from __future__ import annotations

import errno

__all__ = ["INVALID_ARGUMENT", "LEASE_HELD", "NOT_READY", "builtin_error"]

#: Another client holds the file's lease, or the NameNode is recovering it: wait and retry.
LEASE_HELD = frozenset({"AlreadyBeingCreatedException", "RecoveryInProgressException"})
#: The NameNode refuses changes for now (just started, blocks not reported yet): wait.
NOT_READY = frozenset({"SafeModeException", "RetriableException"})
#: A parameter the NameNode refused. The backends raise it differently on purpose: WebHDFS as
#: ``ValueError`` (a request we built wrong), hdfs:// as ``OSError(EINVAL)`` (the client's).
INVALID_ARGUMENT = frozenset({"HadoopIllegalArgumentException", "IllegalArgumentException"})

_BY_CLASS: dict[str, tuple[type[OSError], int]] = {
    "FileNotFoundException": (FileNotFoundError, errno.ENOENT),
    "FileAlreadyExistsException": (FileExistsError, errno.EEXIST),
    "AccessControlException": (PermissionError, errno.EACCES),
    "SecurityException": (PermissionError, errno.EACCES),
    "AuthorizationException": (PermissionError, errno.EACCES),
    "ParentNotDirectoryException": (NotADirectoryError, errno.ENOTDIR),
    "PathIsNotEmptyDirectoryException": (OSError, errno.ENOTEMPTY),
    **{name: (BlockingIOError, errno.EWOULDBLOCK) for name in LEASE_HELD},
}


def builtin_error(java_class: str, message: str, where: str) -> OSError | None:
    """The built-in exception for the Java exception ``java_class`` (simple name), with
    ``message`` and the path ``where`` (a URI); ``None`` when the table has no entry."""
    entry = _BY_CLASS.get(java_class)
    if entry is None:
        return None
    kind, code = entry
    return kind(code, message, where)
