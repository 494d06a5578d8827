"""Exactly-once recovery on hdfs:// without a truncate in the client: the two ways, measured.

hdfs-native (the hdfs:// client) has no truncate. When the sink restores an in-progress file
that grew after the cut it can either

- **rewrite**: copy the checkpointed prefix into a fresh in-progress file and rename it over the
  old one (the sink's no-truncate path: cost grows with the file), or
- **truncate**: send TRUNCATE through the same cluster's WebHDFS and wait for the cut block's
  recovery (what ``NativeHdfsFileSystem`` does when a WebHDFS address is known).

Each is timed until the file can be appended to again, on a real HDFS (``hdfs-region sandbox``,
started here) for several file sizes, cutting 1 KiB off the end (inside a block, so TRUNCATE
answers false and the block is recovered)::

    python bench/bench_hdfs_truncate.py [--sizes 1,16,64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_common_args, machine, median, print_table, write_json
from operators.fs import FileSystemSettings, NativeHdfsFileSystem
from operators.sandbox import Sandbox
from region.fs import FileSystem

_CHUNK = 4 << 20  # the sink's copy chunk


def _put(fs: FileSystem, path: str, size: int) -> None:
    block = (b"0123456789abcdef" * 4096)[: 1 << 16]
    w = fs.create(path, overwrite=True)
    left = size
    while left > 0:
        w.write(block[: min(left, len(block))])
        left -= len(block)
    w.close()


def _rewrite(fs: FileSystem, path: str, keep: int) -> None:
    """The sink's no-truncate recovery: the prefix into a new file, renamed over the old."""
    tmp = path + ".rewrite"
    w = fs.create(tmp, overwrite=True)
    offset = 0
    while offset < keep:
        chunk = fs.read(path, offset, min(_CHUNK, keep - offset))
        w.write(chunk)
        offset += len(chunk)
    w.sync()
    w.close()
    fs.rename(tmp, path, overwrite=True)


def _append_one(fs: FileSystem, path: str) -> None:
    w = fs.append(path)
    w.write(b"x")
    w.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64", help="file sizes in MiB (default 1,16,64)")
    parser.add_argument("--repeats", type=int, default=5)
    add_common_args(parser, "hdfs_truncate")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = machine()["load_average"]
    rows: list[list[object]] = []
    results: list[dict[str, object]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-truncate-") as work,
        Sandbox.start(Path(work), datanodes=1) as sandbox,
    ):
        settings = FileSystemSettings(
            uri=sandbox.info.hdfs, user="bench", config_dir=sandbox.info.conf_dir
        )
        fs = NativeHdfsFileSystem(settings)
        assert fs.supports_truncate
        for mib in sizes:
            size = mib << 20
            keep = size - 1024
            timings: dict[str, list[float]] = {"rewrite": [], "truncate": []}
            for i in range(args.repeats):
                for how in ("rewrite", "truncate"):
                    path = f"/bench/{how}-{mib}-{i}"
                    _put(fs, path, size)
                    started = time.perf_counter()
                    if how == "rewrite":
                        _rewrite(fs, path, keep)
                    else:
                        fs.truncate(path, keep)
                    _append_one(fs, path)  # ready for the sink's next write
                    timings[how].append(time.perf_counter() - started)
                    assert fs.status(path).size == keep + 1
                    fs.delete(path)
            rewrite, truncate = median(timings["rewrite"]), median(timings["truncate"])
            rows.append([f"{mib} MiB", rewrite, truncate, rewrite / truncate])
            results.append(
                {
                    "mib": mib,
                    "rewrite_s": timings["rewrite"],
                    "truncate_s": timings["truncate"],
                    "median_rewrite_s": rewrite,
                    "median_truncate_s": truncate,
                }
            )
    print_table(
        f"Recovery of an in-progress file on hdfs:// (median of {args.repeats}, seconds)",
        ["file", "rewrite prefix", "WebHDFS TRUNCATE", "rewrite / truncate"],
        rows,
    )
    load_after = machine()["load_average"]
    print(f"load average before {load_before}, after {load_after}")
    write_json(
        args.json,
        {
            "benchmark": "hdfs_truncate",
            "repeats": args.repeats,
            "results": results,
            "load_before": load_before,
            "load_after": load_after,
        },
    )


if __name__ == "__main__":
    main()
