"""A user's own PySpark job on the test cluster, run as its own driver process.

Usage: python -m tests.spark.cluster_job JSON, where JSON holds ``master``, ``conf`` (Spark
settings: executors, ``spark.submit.pyFiles``), and for ``"mode": "pipeline"``: ``hdfs``
(``hdfs://host:port``), ``root`` (a directory on it), ``fs`` (filesystem options), ``gate`` (a
local directory: each task writes ``started-<pid>`` there and waits for ``go``; the workers are on
this machine); for ``"mode": "refusals"``: prints (on one line each) the errors of executors
without the project, of a driver-local path, and of executors running another release
(``release`` and ``other``: zips of two releases).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def session(args: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("cluster-job").master(args["master"])
    for key, value in args["conf"].items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def pipeline(args: dict[str, Any]) -> None:
    from pyspark.sql.functions import col, udf

    from operators.spark import register

    spark = session(args)
    register(spark)
    gate = args["gate"]

    def wait_for_gate(value: str) -> str:
        # Tasks of the first batch hold here until the test has killed a worker.
        with open(os.path.join(gate, f"started-{os.getpid()}"), "w"):
            pass
        while not os.path.exists(os.path.join(gate, "go")):
            time.sleep(0.05)
        return value.upper()

    base = args["hdfs"] + args["root"]
    reader = spark.readStream.format("hdfs_scan").options(**args["fs"])
    frame = (
        reader.option("directory", base + "/landing")
        .option("plan_dir", base + "/ck/plans")
        .option("maxFilesPerTrigger", "2")
        .option("split_size", "4000")
        .load()
    )
    query = (
        frame.select(udf(wait_for_gate, "string")(col("value")).alias("value"))
        .writeStream.format("hdfs_sink")
        .options(**args["fs"])
        .option("file", base + "/out/part-%FILENUM.txt")
        .option("checkpointLocation", base + "/ck/spark")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    print("done", flush=True)


def refusals(args: dict[str, Any]) -> None:
    from operators.spark import register

    spark = session(args)  # nothing shipped yet
    for step, shipped in (("unshipped", None), ("local", "release"), ("mismatch", "other")):
        if shipped is not None:
            spark.sparkContext.addPyFile(args[shipped])  # the later one comes first on the path
        try:
            register(spark)
            if step == "local":
                spark.readStream.format("hdfs_scan").option(
                    "directory", "file:///tmp/landing"
                ).option("plan_dir", args["hdfs"] + "/plans").load()
            print(f"{step}: accepted", flush=True)
        except Exception as exc:
            print(f"{step}: {' '.join(str(exc).split())}", flush=True)
    spark.stop()


if __name__ == "__main__":
    arguments = json.loads(sys.argv[1])
    {"pipeline": pipeline, "refusals": refusals}[arguments["mode"]](arguments)
