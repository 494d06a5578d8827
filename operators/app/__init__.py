"""The ``hdfs-region`` application: the command line, the pipeline config (TOML), the two
engines that run it, inspect, the demo and the progress display.

Nothing in ``operators`` outside this package imports it: the operators, the filesystems, the
Spark data sources and the testing toolkit are usable without the application.
"""
