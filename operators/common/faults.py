"""Crash tests stop a process at a named point of a multi-step protocol, to kill it there.

``HDFS_REGION_FAULT=<point>[:<batch id>]`` names the point; when the process reaches it, it
writes a file named after the point into ``$HDFS_REGION_FAULT_DIR`` (holding its pid) and waits
until it is killed (at most 5 minutes, or until its parent is gone). Points are named by the
modules that call :func:`stop_here` (the Spark sink's commit, the file copy).
"""

from __future__ import annotations

import logging
import os
import time

__all__ = ["FAULT_DIR_ENV", "FAULT_ENV", "stop_here"]

logger = logging.getLogger(__name__)

FAULT_ENV = "HDFS_REGION_FAULT"
FAULT_DIR_ENV = "HDFS_REGION_FAULT_DIR"


def stop_here(point: str, batch_id: int | None = None, *, who: str = "hdfs-region") -> None:
    """Wait here to be killed when ``$HDFS_REGION_FAULT`` names ``point`` (and, when it names a
    batch, ``batch_id``); return at once otherwise."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    name, _, batch = wanted.partition(":")
    if name != point or (batch and batch_id is not None and int(batch) != batch_id):
        return
    directory = os.environ.get(FAULT_DIR_ENV, ".")
    with open(os.path.join(directory, point), "w") as marker:
        marker.write(str(os.getpid()))
    logger.warning("%s: stopped at %s (batch %s) until killed", who, point, batch_id)
    parent = os.getppid()
    deadline = time.monotonic() + 300
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(1)  # nobody killed us: do not linger
