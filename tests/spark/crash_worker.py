"""A Spark query in its own process, for the SIGKILL tests: scan -> upper -> sink, availableNow.

Usage: python -m tests.spark.crash_worker SRC OUT CHECKPOINT [parquet]. The sink stops at the
point named by $HDFS_REGION_FAULT (see operators.spark.sink.FAULT_ENV) until the test kills the
process. ``parquet``: lines ``id,name,country,...`` become typed columns, written as Parquet
partitioned by ``country`` (tests/spark/test_spark_tables.py).
"""

from __future__ import annotations

import sys

from operators.spark.session import build_session


def main(src: str, out: str, ck: str, kind: str = "lines") -> int:
    spark = build_session("crash-worker")
    frame = (
        spark.readStream.format("hdfs_scan")
        .option("directory", src)
        .option("plan_dir", ck + "/plans")
        .option("maxFilesPerTrigger", "1")
        .option("split_size", "2000")
        .load()
    )
    if kind == "parquet":
        writer = (
            frame.selectExpr(
                "CAST(split(value, ',')[0] AS BIGINT) AS id",
                "split(value, ',')[1] AS name",
                "split(value, ',')[2] AS country",
            )
            .writeStream.format("hdfs_sink")
            .option("file", out + "/part-%FILENUM.parquet")
            .option("format", "parquet")
            .option("partition_by", "country")
            .option("tuples_per_file", "40")
        )
    else:
        writer = (
            frame.selectExpr("upper(value) AS value")
            .writeStream.format("hdfs_sink")
            .option("file", out + "/part-%FILENUM.txt")
        )
    query = writer.option("checkpointLocation", ck + "/spark").trigger(availableNow=True).start()
    query.awaitTermination()
    spark.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
