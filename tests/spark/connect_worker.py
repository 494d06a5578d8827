"""A Spark Connect client in its own process, for the kill -9 tests: ``hdfs_scan`` -> upper ->
``hdfs_sink`` through ``sc://``, everything on the cluster.

Usage: python -m tests.spark.connect_worker URL OPTIONS_JSON (available-now|continuous).
``OPTIONS_JSON``: ``{"source": {...}, "sink": {...}}``, the options of each side (paths and
the checkpoint location are URIs the server reaches). ``continuous`` runs until killed.
"""

from __future__ import annotations

import json
import sys

from operators.spark.connect import connect_session


def main(url: str, options_json: str, mode: str) -> int:
    options = json.loads(options_json)
    spark = connect_session(url)
    writer = (
        spark.readStream.format("hdfs_scan")
        .options(**options["source"])
        .load()
        .selectExpr("upper(value) AS value")
        .writeStream.format("hdfs_sink")
        .options(**options["sink"])
        .queryName("connect_worker")
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="500 milliseconds")
    query = writer.start()
    print("started", query.id, flush=True)
    query.awaitTermination()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
