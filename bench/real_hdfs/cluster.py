"""The cluster the parts run on: one named by the flags, or a sandbox started for the run."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.real_hdfs.files import write_file
from operators.fs import FileSystemSettings, open_path
from operators.sandbox import Sandbox
from region.fs import FileSystem


@dataclass(frozen=True)
class Cluster:
    """Where the cluster is and how to reach it."""

    hdfs: str
    webhdfs: str
    conf_dir: str | None
    user: str
    sandbox: dict[str, Any] | None  # the sandbox's ready line; None for a cluster named by flags
    #: Timeout of one request (listing a directory of a million files takes minutes).
    timeout: float = 60.0

    def settings(self, backend: str) -> FileSystemSettings:
        uri = self.hdfs if backend == "hdfs" else self.webhdfs
        values: dict[str, Any] = {"uri": uri, "user": self.user, "timeout": self.timeout}
        if backend == "hdfs" and self.conf_dir:
            values["config_dir"] = self.conf_dir
        return FileSystemSettings.model_validate(values)

    def open(self, backend: str, root: str) -> FileSystem:
        uri = self.hdfs if backend == "hdfs" else self.webhdfs
        fs, _ = open_path(uri + root, self.settings(backend))
        return fs


@contextlib.contextmanager
def cluster(
    args: argparse.Namespace, work: Path, *, timeout: float = 60.0, block_size: int = 1 << 20
) -> Iterator[Cluster]:
    """The cluster named by the flags, else a sandbox started for this run with blocks of
    ``block_size`` bytes."""
    if args.hdfs:
        yield Cluster(args.hdfs, args.webhdfs, args.conf_dir, args.user, None, timeout)
        return
    started = time.perf_counter()
    sandbox = Sandbox.start(
        work / f"sandbox-{block_size}",
        datanodes=getattr(args, "datanodes", 1),
        block_size=block_size,
    )
    try:
        info = dict(sandbox.info.raw)
        info["python_start_seconds"] = round(time.perf_counter() - started, 2)
        yield Cluster(
            sandbox.info.hdfs, sandbox.info.webhdfs, sandbox.info.conf_dir, args.user, info, timeout
        )
    finally:
        sandbox.stop()


def block_layout(c: Cluster, root: str) -> dict[str, int | None]:
    """The block size and replication the cluster gives a new file (of its defaults)."""
    fs = c.open("hdfs", root)
    probe = f"{root}/.probe"
    write_file(fs, probe, [b"x"])
    try:
        client = getattr(fs, "client", None)  # NativeHdfsFileSystem's hdfs_native.Client
        info = client.get_file_info(probe) if client is not None else None
        return {
            "block_size": int(info.blocksize) if info is not None else None,
            "replication": int(info.replication) if info is not None else None,
        }
    finally:
        fs.delete(probe)
