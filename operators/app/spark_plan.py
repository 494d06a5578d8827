"""The Spark engine's plan of a pipeline, checked before any JVM starts: the options of the
``hdfs_scan`` source and ``hdfs_sink`` sink from the settings, where Spark's own checkpoint goes,
which secrets travel by environment, and what a cluster or YARN refuses."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
from typing import Any

from operators.app.config import PipelineConfig
from operators.app.engines import (
    load_function,
)
from operators.common.plugins import load_callable
from operators.sink.owner import SINK_DIR
from operators.sink.settings import SinkSettings
from operators.spark.batchlog import PLANS_DIR, SPARK_DIR
from operators.spark.executors import check_shared_path
from operators.spark.options import FILE_FIELDS, JSON_FIELDS, SCAN_FIELDS, rows_need_transform
from region.errors import ConfigError

__all__ = [
    "SECRET_ENV",
    "SparkPlan",
    "check_jvm_environment",
    "check_streaming_on_yarn",
    "fused",
    "hdfs_uri_of_webhdfs",
    "plan_spark",
]

logger = logging.getLogger(__name__)


#: Secrets reach the data sources through these environment variables, never as option values:
#: Spark keeps options in its query plans (shown by explain, the UI and event logs). A name
#: containing "SECRET" is hidden by Spark's default ``spark.redaction.regex`` wherever it
#: appears as a configuration key (e.g. ``spark.executorEnv.*`` on a cluster).
SECRET_ENV = {
    "password": "HDFS_REGION_SECRET_PASSWORD",
    "token": "HDFS_REGION_SECRET_TOKEN",
    "keytab": "HDFS_REGION_SECRET_KEYTAB",
    "key_store_password": "HDFS_REGION_SECRET_KEY_STORE_PASSWORD",
}


class SparkPlan:
    """The options of the query, checked before any JVM starts (so configuration errors are
    fast and never need Java)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        cp_settings, cp_path = config.locate(config.region.checkpoint_dir)
        self.checkpoint_dir = cp_path
        self.checkpoint_settings = cp_settings
        #: Environment variables to set before the JVM starts (see :data:`SECRET_ENV`).
        self.secret_env: dict[str, str] = {}
        #: The Hadoop user and configuration of Spark's JVM (see :func:`_jvm_environment`).
        self.jvm_env = _jvm_environment(config)
        self.spark_checkpoint = _spark_checkpoint(config)
        self.query_name = (
            "hdfs_region_" + hashlib.sha256(config.pipeline_id().encode()).hexdigest()[:12]
        )
        self.source_options = self._source_options()
        self.sink_options = self._sink_options()
        #: The output directory, and where the sink's write-ahead log is (the sink's default),
        #: for ``inspect``.
        template = config.sink.template
        if template is None:  # file names from records, below the base directory
            self.output_dir = config.sink.directory or "."
        else:
            self.output_dir = posixpath.dirname(template) or "."
        self.sink_log = config.display(_join(self.output_dir, SINK_DIR))
        self._check_shared_paths()
        if config.spark.execution == "streaming":
            check_streaming_on_yarn(config)
        _check_kerberos_on_yarn(config)
        if (
            config.transform is not None
            and config.transform.vectorized
            and config.source.format not in ("csv", "jsonl")
        ):
            msg = (
                "[transform] vectorized = true: the function takes the records' columns, which "
                "records have with [source] format = 'csv' or 'jsonl' and a [source.schema]"
            )
            raise ConfigError(msg)
        if config.transform is not None and config.transform.function is not None:
            load_function(config.transform.function, config.folder)  # fails here, not in Spark
        if config.sink.on_published is not None:
            load_callable(config.sink.on_published, "[sink] on_published", config.folder)

    @property
    def delegates(self) -> bool:
        """Whether the tasks get a delegation token instead of the Kerberos login: a keytab
        stays on the driver. On WebHDFS always; on hdfs:// on YARN, whose containers hold no
        keytab (hdfs-native reads the token from a token file, :mod:`operators.fs.token_file`).
        """
        from operators.spark.yarn import is_yarn_master

        fs = self.config.filesystem
        if fs.kerberos_principal is None or fs.token is not None:
            return False
        return fs.kind == "webhdfs" or (
            fs.kind == "hdfs" and is_yarn_master(self.config.spark.master)
        )

    def _check_shared_paths(self) -> None:
        """On a cluster, refuse a landing, output or checkpoint directory on the local disk
        (executors on other hosts would each use their own disk)."""
        config = self.config
        for key, path in (
            ("[scan] directory", config.scan_directory),
            ("[sink] file", self.output_dir),
            ("[region] checkpoint_dir", config.region.checkpoint_dir),
        ):
            if config.locate(path)[0].kind == "local":
                check_shared_path(key, config.display(path), config.spark.master)

    def _fs_options(self) -> dict[str, str]:
        fs = self.config.filesystem
        out: dict[str, str] = {}
        login = {"kerberos_principal", "keytab", "keytab_env"}
        if self.delegates:
            out["token_env"] = SECRET_ENV["token"]  # set by run_spark before the JVM starts
        for field in fs.model_fields_set:
            value = getattr(fs, field)
            if value is None or (self.delegates and field in login):
                continue
            if field in SECRET_ENV:
                if getattr(fs, f"{field}_env") is None:  # else that reference is passed on
                    self.secret_env[SECRET_ENV[field]] = value.get_secret_value()
                    out[f"{field}_env"] = SECRET_ENV[field]
                continue
            out[field] = str(value)
        return out

    def _without_password(self, key: str, path: str) -> str:
        """``path``, refused when its URI carries a password (it would become an option)."""
        settings = self.config.locate(path)[0]
        if settings is not self.config.filesystem and settings.password is not None:
            msg = (
                f"{key}: {self.config.display(path)!r} carries a password in its URI, which the "
                "spark engine would pass as a plain option (visible in query plans): give it in "
                "[filesystem] (password or password_env)"
            )
            raise ConfigError(msg)
        return path

    def _source_options(self) -> dict[str, str]:
        config = self.config
        scan, source = config.scan, config.source
        if source.format == "jsonl" and source.schema_ is None:
            msg = (
                "[source] format = 'jsonl': the spark engine needs [source.schema] (a "
                "DataFrame's columns are known before any file is read), e.g. "
                'schema = { id = "int64", name = "string" }'
            )
            raise ConfigError(msg)
        if source.format in ("csv", "jsonl") and config.transform is None:
            sink_format = config.sink.format
            if sink_format in ("line", "binary"):
                raise ConfigError(rows_need_transform(source.format))
        options = self._fs_options()
        options["directory"] = self._without_password("[scan] directory", config.scan_directory)
        paths = ("directory", "archive_dir")  # as given, each checked for a password below
        for field in (f for f in SCAN_FIELDS if f not in paths):
            if field in scan.model_fields_set and getattr(scan, field) is not None:
                options[field] = _text(getattr(scan, field))
        if scan.archive_dir is not None:
            options["archive_dir"] = self._without_password("[scan] archive_dir", scan.archive_dir)
        sink = config.sink
        limits = (sink.tuples_per_file, sink.bytes_per_file, sink.time_per_file)
        streaming = config.spark.execution == "streaming" or (
            config.transform is not None and config.transform.sql is not None
        )
        if scan.after_read != "keep" and streaming and any(v is not None for v in limits):
            # A streaming query tells the source a batch is done, not that the sink's open
            # file holding its records is published.
            msg = (
                f"[scan] after_read = {scan.after_read!r} with a file limit needs fused "
                "execution (no [transform] sql, [spark] execution = 'auto'): a streaming "
                "query could archive input whose records wait in an open file"
            )
            raise ConfigError(msg)
        for field in ("init_delay", "roots"):
            if field in scan.model_fields_set:
                logger.warning("[scan] %s is not used by the spark engine", field)
        for field in FILE_FIELDS:
            value = getattr(source, field)
            if value is None:
                continue  # the default (no schema, no escape)
            options[field] = json.dumps(_listed(value)) if field in JSON_FIELDS else _text(value)
        if "init_delay" in source.model_fields_set:
            logger.warning("[source] init_delay is not used by the spark engine")
        spark = config.spark
        if spark.max_files_per_trigger is not None:
            options["max_files_per_trigger"] = str(spark.max_files_per_trigger)
        if spark.max_bytes_per_trigger is not None:
            options["max_bytes_per_trigger"] = str(spark.max_bytes_per_trigger)
        # One query per plan directory, kept with this pipeline's checkpoint (never in the
        # watched directory, which may be read-only and is shared with other readers).
        plans = _join(self.checkpoint_dir, PLANS_DIR)
        if self.checkpoint_settings.uri == "file:///":  # a local checkpoint, whatever [filesystem]
            plans = "file://" + os.path.abspath(plans)
        else:
            plans = _join(config.region.checkpoint_dir, PLANS_DIR)
        options["plan_dir"] = plans
        return options

    def _check_rejects(self) -> None:
        """``[sink] rejects_file`` on Spark keeps the rows a CSV or JSON-lines source cannot
        read, published with their batch by fused execution: refused where nothing would
        ever reach it."""
        source = self.config.source
        why = None
        if source.format not in ("csv", "jsonl"):
            why = (
                f"[source] format = {source.format!r} has no rows that do not fit (on the spark "
                "engine the rejects file keeps those of format = 'csv' or 'jsonl')"
            )
        elif source.on_bad_row != "reject":
            why = f"[source] on_bad_row = {source.on_bad_row!r} hands no row to it"
        elif self.config.spark.execution == "streaming":
            why = (
                "a streaming query (execution = 'streaming') logs the rows instead: fused "
                "execution writes them (execution = 'auto')"
            )
        if why is not None:
            msg = f"[sink] rejects_file: never written by the spark engine here: {why}"
            raise ConfigError(msg)

    def _sink_options(self) -> dict[str, str]:
        sink = self.config.sink
        transform = self.config.transform
        if sink.file_attribute_name is not None and transform is None:
            msg = (
                f"[sink] file_attribute_name: {sink.file_attribute_name!r} names a column the "
                "records do not have: give a [transform] (function = 'module:function' returning "
                "(name, value), or sql selecting a column of that name and value)"
            )
            raise ConfigError(msg)
        if sink.close_on_punct and (
            self.config.spark.execution == "streaming"
            or (transform is not None and transform.sql is not None)
        ):
            msg = (
                "[sink] close_on_punct: needs the end of each input file, which a SQL transform "
                "or a streaming query (execution = 'streaming') does not pass on; use "
                "function = 'module:function' or no transform, or a file limit"
            )
            raise ConfigError(msg)
        if sink.on_bad_record not in (None, "fail"):
            msg = (
                f"[sink] on_bad_record = {sink.on_bad_record!r}: not supported by the spark "
                "engine, where a record that cannot be written fails its batch (use the local "
                "engine; rejects_file keeps the rows the source cannot read on both engines)"
            )
            raise ConfigError(msg)
        if sink.rejects_file is not None:
            self._check_rejects()
        if sink.publish != "atomic":
            msg = (
                f"[sink] publish: the spark engine publishes by rename only (got {sink.publish!r})"
            )
            raise ConfigError(msg)
        table = sink.format not in ("line", "binary")
        rows = self.config.source.format not in ("line", "binary")
        sql = transform is not None and transform.sql is not None
        if table and not rows and not sql:
            # The columns come from the rows read, a SQL transform or a function of rows.
            msg = (
                f"[sink] format = {sink.format!r}: the spark engine writes the columns of the "
                "rows read ([source] format = 'csv' or 'jsonl', with or without a [transform] "
                'function) or of a [transform] sql (e.g. sql = "SELECT CAST(split(value, '
                "',')[0] AS BIGINT) AS id, ... FROM input\")"
            )
            raise ConfigError(msg)
        if table and transform is not None and not sql and sink.schema_ is None:
            msg = (
                f"[sink] format = {sink.format!r} after [transform] function: the spark engine "
                "needs the columns the function returns as [sink.schema] (a DataFrame's columns "
                'are known before any record is), e.g. schema = { id = "int64" }'
            )
            raise ConfigError(msg)
        options = self._fs_options()
        if sink.file is not None:
            options["file"] = self._without_password("[sink] file", sink.file)
        if sink.directory is not None:
            options["directory"] = self._without_password("[sink] directory", sink.directory)
        if sink.file_attribute_name is not None:
            options["file_attribute_name"] = sink.file_attribute_name
            options["on_returning_name"] = sink.on_returning_name
            options["max_open_files"] = str(sink.max_open_files)
        for field in ("time_format", "encoding", "format", "delivery"):
            options[field] = _text(getattr(sink, field))
        options["permission"] = oct(sink.permission)
        if sink.close_on_punct:
            options["close_on_punct"] = "true"
        options["close_idle_after"] = _text(sink.close_idle_after or "never")
        for field in ("tuples_per_file", "bytes_per_file", "time_per_file"):
            if getattr(sink, field) is not None:
                options[field] = str(getattr(sink, field))
        # Files as full as the limit says: the run publishes the open ones at every stop.
        options["span_batches"] = "true"
        if table:
            options.update(_table_options(sink))
        elif sink.compression is not None:
            options["compression"] = sink.compression
        options["manifest"] = _text(sink.manifest)
        options["manifest_retain"] = str(sink.manifest_retain)
        if sink.on_published is not None:
            options["on_published"] = sink.on_published
        if sink.rejects_file is not None:
            options["rejects_file"] = sink.rejects_file
        return options


def _table_options(sink: SinkSettings) -> dict[str, str]:
    """The ``hdfs_sink`` options of records with columns (lists and tables as JSON)."""
    out: dict[str, str] = {}
    if sink.compression is not None:
        out["compression"] = sink.compression
    if sink.schema_ is not None:
        out["schema"] = json.dumps(sink.schema_)
    if sink.partition_by:
        out["partition_by"] = json.dumps(list(sink.partition_by))
        out["max_open_files"] = str(sink.max_open_files)
    if sink.derived:
        out["derived"] = json.dumps({k: d.model_dump() for k, d in sink.derived.items()})
    if sink.format == "csv":
        out["header"] = _text(sink.header)
        out["delimiter"] = sink.delimiter
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _listed(value: Any) -> Any:
    """A value for JSON: a tuple as a list, a mapping as a dict."""
    if isinstance(value, tuple):
        return list(value)
    return dict(value) if hasattr(value, "items") else value


def _join(path: str, name: str) -> str:
    return path.rstrip("/") + "/" + name


def _jvm_environment(config: PipelineConfig) -> dict[str, str]:
    """``HADOOP_USER_NAME`` and ``HADOOP_CONF_DIR`` for Spark's JVM, from ``[filesystem]``.

    Spark's own Hadoop client (its checkpoint, and anything Spark itself reads or writes) acts
    as the login user of the JVM unless ``HADOOP_USER_NAME`` says otherwise, and reads the
    Hadoop configuration from ``HADOOP_CONF_DIR``. Our data sources act as ``user`` with the
    configuration of ``config_dir``: the JVM is given the same (simple authentication; with
    Kerberos the JVM logs in with the keytab, :func:`_jvm_login`).
    """
    fs = config.filesystem
    env: dict[str, str] = {}
    if fs.config_dir is not None:
        env["HADOOP_CONF_DIR"] = fs.config_dir
    if fs.user is not None and fs.kerberos_principal is None:
        env["HADOOP_USER_NAME"] = fs.user
    return env


def check_jvm_environment(env: dict[str, str]) -> None:
    """Refuse a ``HADOOP_USER_NAME`` of this process that names another user than ``env``
    (Spark's JVM, like hdfs-native, acts as one user per process)."""
    user, current = env.get("HADOOP_USER_NAME"), os.environ.get("HADOOP_USER_NAME")
    if user is not None and current is not None and current != user:
        msg = (
            f"[filesystem] user: {user!r} conflicts with HADOOP_USER_NAME={current!r}, the "
            "user Spark's JVM would act as: unset it or give the same user"
        )
        raise ConfigError(msg)


def _spark_checkpoint(config: PipelineConfig) -> str:
    """Spark's checkpoint location, a URI for Spark's own Hadoop client: the ``spark`` folder
    of ``[region] checkpoint_dir``.

    Spark's bundled Hadoop client cannot use ``webhdfs://`` at all: its shaded WebHDFS client
    parses every answer through a JAX-RS ``MediaType`` whose implementation (Jersey) the shaded
    jars leave out (``ClassNotFoundException: org.apache.hadoop.shaded.org.glassfish.jersey.
    internal.RuntimeDelegateImpl``). So for a checkpoint directory on ``webhdfs://``, Spark keeps
    its part in the same directory of the same cluster through ``hdfs://``, whose NameNode
    address comes from the Hadoop configuration (``config_dir`` or ``HADOOP_CONF_DIR``).
    """
    settings, checkpoint_dir = config.locate(config.region.checkpoint_dir)
    path = posixpath.join(checkpoint_dir, SPARK_DIR)
    if settings.kind != "webhdfs":
        return settings.display(path)
    conf_dir = config.filesystem.config_dir or os.environ.get("HADOOP_CONF_DIR")
    rpc = hdfs_uri_of_webhdfs(settings.hosts(), conf_dir)
    if rpc is None:
        msg = (
            f"[region] checkpoint_dir: {config.display(config.region.checkpoint_dir)!r}: "
            "Spark's bundled Hadoop client cannot use webhdfs:// (its WebHDFS client lacks "
            "Jersey), so Spark keeps its checkpoint there through hdfs://, but the cluster's "
            "NameNode RPC address is not known: give [filesystem] config_dir (or "
            "HADOOP_CONF_DIR) with the cluster's core-site.xml / hdfs-site.xml, or put "
            "checkpoint_dir on hdfs:// or a local path"
        )
        raise ConfigError(msg)
    return rpc + path


def hdfs_uri_of_webhdfs(hosts: list[tuple[str, int]], conf_dir: str | None) -> str | None:
    """``hdfs://<name service or rpc host:port>`` of the cluster whose NameNodes serve WebHDFS
    at ``hosts``, from the Hadoop configuration in ``conf_dir``; ``None`` when it names none.

    Matched on ``dfs.namenode.http-address[.<nameservice>.<id>]`` (a wildcard host ``0.0.0.0``
    matches by port), else on the host of an ``hdfs://`` ``fs.defaultFS`` when the
    configuration gives no HTTP address.
    """
    from operators.fs.native import hadoop_properties

    props = hadoop_properties(conf_dir)

    def serves(http: str | None) -> bool:
        if not http or ":" not in http:
            return False
        host, _, port = http.strip().rpartition(":")
        return any(port == str(p) and host in (h, "0.0.0.0") for h, p in hosts)

    for ns in (n.strip() for n in props.get("dfs.nameservices", "").split(",")):
        ids = props.get(f"dfs.ha.namenodes.{ns}", "") if ns else ""
        keys = [f"dfs.namenode.http-address.{ns}.{i.strip()}" for i in ids.split(",") if i]
        if any(serves(props.get(k)) for k in keys):
            return f"hdfs://{ns}"
    default = props.get("fs.defaultFS", "")
    default_authority = (
        default[len("hdfs://") :].split("/")[0] if default.startswith("hdfs://") else ""
    )
    http = props.get("dfs.namenode.http-address")
    if http is not None:
        if not serves(http):
            return None
        rpc = props.get("dfs.namenode.rpc-address") or default_authority
        if not rpc:
            return None
        host, _, port = rpc.rpartition(":")
        if host == "0.0.0.0":  # the NameNode listens on every address: use the one given
            rpc = f"{hosts[0][0]}:{port}"
        return f"hdfs://{rpc}"
    if default_authority and default_authority.rsplit(":", 1)[0] in (h for h, _ in hosts):
        return f"hdfs://{default_authority}"
    return None


def check_streaming_on_yarn(config: PipelineConfig, what: str | None = None) -> None:
    """Refuse a streaming query on YARN with the packed environment: Spark plans the Python
    data sources in Python processes beside the driver, started with the containers' Python
    (``./environment/bin/python``, a path only inside a container)."""
    from operators.spark.yarn import is_yarn_master

    conf = config.spark.conf
    if not is_yarn_master(config.spark.master) or "spark.pyspark.python" in conf:
        return
    what = what or "[spark] execution = 'streaming'"
    msg = (
        f"{what} on YARN: Spark would start the "
        "hdfs_scan source's planner beside the driver with the containers' Python "
        "(./environment/bin/python), which exists only in a container: use fused execution "
        "([spark] execution = 'auto', a SQL transform without state across batches), or give "
        "spark.archives and a spark.pyspark.python present on the driver's host and the "
        "NodeManagers alike"
    )
    raise ConfigError(msg)


def _check_kerberos_on_yarn(config: PipelineConfig) -> None:
    """Refuse cluster mode with a Kerberos login: the submitting command would need its own
    login, and the application master the keytab on its host; only client mode, where the
    driver holds the keytab and hands the executors delegation tokens, is made and tested."""
    from operators.spark.yarn import is_yarn_master

    principal = config.filesystem.kerberos_principal
    spark = config.spark
    if principal is None or not is_yarn_master(spark.master) or spark.deploy_mode != "cluster":
        return
    msg = (
        f"[spark] deploy_mode = 'cluster' with [filesystem] kerberos_principal = {principal!r}: "
        "a Kerberized YARN is supported in client mode (the driver keeps the keytab, the "
        "executors get delegation tokens): set deploy_mode = 'client'"
    )
    raise ConfigError(msg)


def plan_spark(config: PipelineConfig) -> SparkPlan:
    """Check the settings for the Spark engine (no JVM); raises ConfigError naming the key."""
    return SparkPlan(config)


def fused(config: PipelineConfig) -> bool:
    """Whether the pipeline may run as fused batches (see :mod:`operators.spark.fused`): unless
    ``[spark] execution = "streaming"``. A SQL transform that keeps state across batches is
    found only once Spark has parsed it, and then runs as a streaming query after all."""
    return config.spark.execution == "auto"
