"""The Flink peer of ``hdfs-region run --available-now``: a PyFlink DataStream job reading the
text lines of a directory once (``FileSource`` with ``TextLineInputFormat``, bounded) into a
``FileSink`` of row format (exactly-once: checkpointing every second), on a local MiniCluster.
No Python code touches a record: both ends are Flink's Java connectors.

It imports nothing of this project: it runs under an interpreter with ``apache-flink``
installed (bench/bench_flink.py explains where), which is not the project's environment.

    python bench/flink_job.py SRC OUT CHECKPOINTS [--parallelism 2]

SRC, OUT and CHECKPOINTS are paths or URIs (``hdfs://`` needs Hadoop's client jars on
``HADOOP_CLASSPATH``). The job ends when every file was read and the final checkpoint has
committed the sink's pending part files.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="the directory read (every file in it, once)")
    parser.add_argument("out", help="the sink's base directory (bucket folders below it)")
    parser.add_argument("checkpoints", help="the checkpoint directory")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--interval", default="1s", help="checkpoint interval (default 1s)")
    args = parser.parse_args(argv)

    from pyflink.common import Configuration, Encoder, WatermarkStrategy
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    from pyflink.datastream.connectors.file_system import FileSink, FileSource, StreamFormat

    config = Configuration()
    config.set_string("execution.checkpointing.interval", args.interval)
    config.set_string("execution.checkpointing.dir", _uri(args.checkpoints))
    env = StreamExecutionEnvironment.get_execution_environment(config)
    # Streaming, as a continuous job runs: the sink commits only at checkpoints (the bounded
    # source's end brings a final one), which is what makes it exactly-once.
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(args.parallelism)
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), _uri(args.src)
    ).build()
    sink = FileSink.for_row_format(_uri(args.out), Encoder.simple_string_encoder()).build()
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "text lines")
    lines.sink_to(sink)
    env.execute("text lines to files")
    return 0


def _uri(path: str) -> str:
    """A local path as a ``file://`` URI (Flink resolves a bare path against its own
    default file system, which a ``fs.default-scheme`` setting may make HDFS)."""
    return path if "://" in path else "file://" + path


if __name__ == "__main__":
    sys.exit(main())
