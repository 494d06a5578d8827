"""The HDFS operators, filesystem adapters, Spark data sources and the command line."""
