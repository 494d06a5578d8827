"""A Spark query in its own process, for the SIGKILL tests: scan -> upper -> sink, availableNow.

Usage: python -m tests.spark.crash_worker SRC OUT CHECKPOINT. The sink stops at the point named
by $HDFS_REGION_FAULT (see operators.spark.sink.FAULT_ENV) until the test kills the process.
"""

from __future__ import annotations

import sys

from operators.spark.session import build_session


def main(src: str, out: str, ck: str) -> int:
    spark = build_session("crash-worker")
    query = (
        spark.readStream.format("hdfs_scan")
        .option("directory", src)
        .option("plan_dir", ck + "/plans")
        .option("maxFilesPerTrigger", "1")
        .option("split_size", "2000")
        .load()
        .selectExpr("upper(value) AS value")
        .writeStream.format("hdfs_sink")
        .option("file", out + "/part-%FILENUM.txt")
        .option("checkpointLocation", ck + "/spark")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
