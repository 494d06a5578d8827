"""The parts of ``bench/bench_hdfs.py``, one measurement each on a real HDFS, with its baseline
measured in the same run on the same cluster: :mod:`~bench.real_hdfs.pipeline` (the in-process
pipeline against a plain copy loop), :mod:`~bench.real_hdfs.cuts` (cut latency against one
durable write), :mod:`~bench.real_hdfs.recovery` (a restart after SIGKILL against a fresh start),
:mod:`~bench.real_hdfs.process` (the whole ``hdfs-region run`` process against a copying
process) and :mod:`~bench.real_hdfs.steady` (throughput and backlog while files land, against a
polling copy process). Each has ``measure(cluster, root, work, args)``, which returns its
figures, and ``show(args, figures, where)``, which prints its table; ``bench_hdfs.py`` holds the
command line, starts a cluster per block size and runs the parts asked for.

What they share: :mod:`~bench.real_hdfs.cluster` (the cluster and how to reach it) and
:mod:`~bench.real_hdfs.files` (plain file operations, which the baselines' processes import
too).
"""
