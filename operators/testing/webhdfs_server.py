"""A WebHDFS-protocol stand-in server for tests and benchmarks, backed by a real directory.

This is a double of the *server*, written from the Hadoop WebHDFS REST specification and held to
Hadoop 3.4.1: tests/fs/test_standin_agrees.py sends the same raw requests here and to the
sandbox's MiniDFSCluster (a real cluster) and asserts the answers agree. The code under test (our
adapter and the ``hdfs`` client) talks to it over real HTTP; the benchmarks and the fault
campaign run against it where a fault must be quick to produce (a server killed mid-write).
It needs only the standard library.

This module is its front door: the names its users import, and ``python -m``. The stand-in
itself is in the modules beside it, one part each:

- ``webhdfs_standin.py``: the server, :class:`WebHdfsServer`: its settings and counters,
  start, stop and restart, the controls a test has (``cut_next_upload_after``,
  :meth:`~WebHdfsServer.recover_leases`...), each request routed to its operation, errors
  answered as RemoteException JSON with Hadoop's exception names (``webhdfs_errors.py``).
- ``webhdfs_operations.py``: GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH, GETHOMEDIRECTORY,
  OPEN, CREATE, APPEND, TRUNCATE, RENAME, DELETE, MKDIRS, SETPERMISSION, SETTIMES, each with
  Hadoop's checks in Hadoop's order.
- ``webhdfs_namespace.py``: what the namenode knows beyond the bytes: the single-writer lease
  and its recovery, blocks (a file's length while written, a truncate's block recovery), HDFS
  permissions; kept across restarts under ``<root>/.webhdfs-stand-in/``.
- ``webhdfs_http.py``: HTTP: the two steps of CREATE, APPEND and OPEN (the "namenode" answers
  307 to a "datanode" URL on the same server), a gateway's path as Apache Knox serves WebHDFS,
  basic authentication, HTTPS.
- ``webhdfs_process.py``: the server in a process of its own (:func:`start_process`).

Simplified on purpose: one process plays namenode and datanodes; no replicas; durability is the
backing disk's; no groups, ACLs or sticky-bit rule. Run it alone with
``python -m operators.testing.webhdfs_server --root DIR --port N``.
"""

from __future__ import annotations

from operators.testing.webhdfs_errors import RemoteError
from operators.testing.webhdfs_http import PREFIX
from operators.testing.webhdfs_namespace import DEFAULT_BLOCK_SIZE, STATE_DIR
from operators.testing.webhdfs_process import ServerProcess, main, start_process
from operators.testing.webhdfs_standin import WebHdfsServer

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "PREFIX",
    "STATE_DIR",
    "RemoteError",
    "ServerProcess",
    "WebHdfsServer",
    "main",
    "start_process",
]

if __name__ == "__main__":
    raise SystemExit(main())
