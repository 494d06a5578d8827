"""The Spark engine: the same pipeline as a Structured Streaming query (local mode by default).

``hdfs_scan`` (scan + file source) -> optional transform (SQL over the view ``input``, or a
per-record Python function as a UDF) -> ``hdfs_sink``. Spark's own checkpoint (offsets and
commits) lives in ``<checkpoint_dir>/spark``; the scan's batch plans in ``<checkpoint_dir>/plans``
when the checkpoint directory is on the scanned filesystem. The region settings map to Spark:
``periodic`` -> a processing-time trigger of ``period``; ``operator_driven`` -> batches end at
file boundaries; ``--available-now`` -> ``Trigger.AvailableNow``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import posixpath
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.app.config import PipelineConfig
from operators.app.console import LOG_CONTEXT, log_format
from operators.app.engines import (
    JobOutput,
    check_after_read,
    check_single_file,
    claim_checkpoint_dir,
    load_function,
    warn_files_left,
)
from operators.app.metrics import Histogram, JobView, MetricsServer, period_of
from operators.app.progress import Progress, ProgressDisplay
from operators.common.plugins import load_callable
from operators.fs import open_path
from operators.sink.owner import SINK_DIR
from operators.spark.executors import check_shared_path
from region.errors import ConfigError, LockLostError
from region.lock import CheckpointLock
from region.signals import StopSignals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from operators.fs.tokens import DelegationToken
    from operators.spark.fused import FusedRunner
    from operators.spark.supervisor import BatchProgress, SparkSupervisor
    from region.fs import FileSystem

__all__ = ["SparkPlan", "plan_spark", "run_spark"]

logger = logging.getLogger(__name__)

#: Region checkpoint layout under ``checkpoint_dir``.
SPARK_DIR = "spark"
PLANS_DIR = "plans"
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
        options = self._fs_options()
        options["directory"] = self._without_password("[scan] directory", config.scan_directory)
        for field in (
            "pattern",
            "strict_mode",
            "min_file_age",
            "late_window",
            "on_late_file",
            "on_modified",
            "remember_files",
            "remember_for",
            "content_check",
            "hold_partial_line",
            "after_read",
        ):
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
        for field in ("format", "encoding", "on_decode_error", "block_size", "read_chunk"):
            options[field] = _text(getattr(source, field))
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
        if sink.on_bad_record not in (None, "fail") or sink.rejects_file is not None:
            msg = (
                "[sink] on_bad_record / rejects_file: not supported by the spark engine, where a "
                "record that cannot be written fails its batch (use the local engine)"
            )
            raise ConfigError(msg)
        if sink.publish != "atomic":
            msg = (
                f"[sink] publish: the spark engine publishes by rename only (got {sink.publish!r})"
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
        options["manifest"] = _text(sink.manifest)
        options["manifest_retain"] = str(sink.manifest_retain)
        if sink.on_published is not None:
            options["on_published"] = sink.on_published
        return options


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


def _jvm_login(config: PipelineConfig) -> dict[str, str]:
    """Spark settings that log Spark's JVM in with ``[filesystem]``'s keytab, for its own Hadoop
    client (its checkpoint on a Kerberized ``hdfs://``): spark-submit logs the JVM in when
    ``spark.kerberos.principal`` and ``keytab`` are set. The keytab's path joins Spark's
    redaction pattern (this project keeps it out of every log); ``KRB5_CONFIG`` of this process,
    when set, becomes the JVM's ``java.security.krb5.conf`` (Java does not read the variable).
    ``[spark] conf`` wins over each."""
    from operators.spark.session import DEFAULT_CONF

    fs = config.filesystem
    if fs.kerberos_principal is None or fs.keytab is None:
        return {}
    conf = {
        "spark.kerberos.principal": fs.kerberos_principal,
        "spark.kerberos.keytab": fs.keytab.get_secret_value(),
        "spark.redaction.regex": "(?i)secret|password|token|access[.]?key|keytab",
    }
    krb5 = os.environ.get("KRB5_CONFIG")
    if krb5:
        java = DEFAULT_CONF["spark.driver.extraJavaOptions"]
        conf["spark.driver.extraJavaOptions"] = f"{java} -Djava.security.krb5.conf={krb5}"
    return conf


def _check_jvm_environment(env: dict[str, str]) -> None:
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


def _transformed(spark: SparkSession, frame: DataFrame, config: PipelineConfig) -> DataFrame:
    transform = config.transform
    if transform is None:
        return frame
    if transform.sql is not None:
        from operators.spark.fused import sql_frame

        return sql_frame(spark, frame, transform.sql)
    assert transform.function is not None
    from pyspark.sql.functions import col, udf

    func = load_function(transform.function, config.folder)
    binary = config.source.format == "binary"
    apply = udf(func, "binary" if binary else "string")
    return frame.select(apply(col("value")).alias("value")).where(col("value").isNotNull())


def _check_remote(plan: SparkPlan, remote: str) -> None:
    """What a Spark Connect run cannot pass to the server, refused before anything is written:
    the data sources and the sink's commit run in the server's Python processes, which read
    secrets from the server's own environment (set when the server started)."""
    if plan.delegates:
        principal = plan.config.filesystem.kerberos_principal
        msg = (
            f"[filesystem] kerberos_principal = {principal!r}: with [spark] remote = {remote!r} "
            "a delegation token of this login cannot reach the server's tasks: start the server "
            f"with a token in {SECRET_ENV['token']} and give token_env = "
            f"'{SECRET_ENV['token']}' (or the server its own Kerberos login)"
        )
        raise ConfigError(msg)
    if plan.secret_env:
        names = ", ".join(sorted(plan.secret_env))
        given = sorted(f for f, env in SECRET_ENV.items() if env in plan.secret_env)
        msg = (
            f"[filesystem] {', '.join(given)}: with [spark] remote = {remote!r} a secret cannot "
            "reach the server's tasks from here (only as an option value, which Spark Connect "
            f"sends in the query plan): start the server with {names} in its environment and "
            f"give {' / '.join(f + '_env' for f in given)} = '<that name>' instead"
        )
        raise ConfigError(msg)
    if plan.jvm_env:
        logger.info(
            "Spark Connect: the server's own environment (%s) decides how Spark's checkpoint "
            "reaches the cluster",
            ", ".join(sorted(plan.jvm_env)),
        )


def _session(config: PipelineConfig, secrets: dict[str, str]) -> SparkSession:
    """The session; on a cluster the secrets' values reach the executors' Python workers
    through its environment, which travels inside each task's Python function: never a Spark
    setting (the UI, event logs and the JVM's command line show those) nor an option."""
    from operators.spark.executors import is_local_master
    from operators.spark.session import build_session

    remote = config.spark.remote
    if remote is not None:
        return _connect_session(config, remote)

    # Spark's Python workers import user transforms from the settings file's folder.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    user_code = config.transform is not None and config.transform.function
    if (user_code or config.sink.on_published) and config.folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, config.folder])
    return build_session(
        f"hdfs-region {config.pipeline_id()}",
        master=config.spark.master,
        conf={**_jvm_login(config), **_deploy_mode(config), **config.spark.conf},
        data_sources=not fused(config),
        environment=None if is_local_master(config.spark.master) else secrets,
        stage_archive=_yarn_stage(config),
        jvm_output_to_log=log_format() == "json",
    )


def _deploy_mode(config: PipelineConfig) -> dict[str, str]:
    from operators.spark.yarn import is_yarn_master

    if not is_yarn_master(config.spark.master):
        return {}
    return {"spark.submit.deployMode": config.spark.deploy_mode}


#: Where a YARN job keeps the packed environment of its containers, on the cluster's default
#: filesystem: any user may read it (the NodeManagers' public cache keeps it across jobs).
YARN_ENV_DIR = "/tmp/hdfs-region/yarn-env"


def _yarn_stage(config: PipelineConfig) -> Callable[[Path], str] | None:
    """On YARN: copies the containers' environment to ``fs.defaultFS`` of the Hadoop
    configuration once (``None``: Spark uploads it with each application)."""
    from operators.fs.hadoop_conf import default_fs
    from operators.spark.yarn import is_yarn_master, stage_archive

    conf_dir = config.filesystem.config_dir or os.environ.get("HADOOP_CONF_DIR")
    found = default_fs(conf_dir) if conf_dir and is_yarn_master(config.spark.master) else None
    if found is None or not found[0].startswith("hdfs://"):
        return None
    settings = config.filesystem.model_copy(update={"uri": found[0]})
    fs, _ = open_path(found[0], settings)
    return functools.partial(stage_archive, fs, YARN_ENV_DIR)


def _connect_session(config: PipelineConfig, remote: str) -> SparkSession:
    """A Spark Connect session to ``remote`` with ``[spark] conf`` set in it (runtime keys
    only: the server's static settings are its own)."""
    from operators.spark.connect import connect_session

    user_code = config.transform is not None and config.transform.function
    if user_code or config.sink.on_published:
        logger.info(
            "Spark Connect: the server's Python workers import user code from their "
            "PYTHONPATH, which must hold %s",
            config.folder,
        )
    spark = connect_session(remote, data_sources=not fused(config))
    for key, value in config.spark.conf.items():
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # the server refuses it (static, or not a Spark key)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            msg = f"[spark] conf: {key} = {value!r} cannot be set over Spark Connect: {first}"
            raise ConfigError(msg) from None
    return spark


class _Stop:
    """Stop requests that may come before the supervisor exists (a signal while the session
    starts, the lock lost): remembered, then passed on. Plain attributes, as signal handlers
    call it. (PySpark starts the JVM ignoring SIGINT, so Ctrl-C reaches only this process.)"""

    def __init__(self) -> None:
        self.target: SparkSupervisor | FusedRunner | None = None
        self.requested = False
        self.now = False

    def request(self, *, immediate: bool = False) -> None:
        self.requested = True
        self.now = self.now or immediate
        if self.target is not None:
            self.target.stop(immediate=self.now)

    def attach(self, target: SparkSupervisor | FusedRunner) -> None:
        self.target = target
        if self.requested:
            target.stop(immediate=self.now)


class _Totals:
    """Progress of the query, fed by the supervisor's per-batch callback."""

    def __init__(self, has_transform: bool) -> None:
        self.started = time.monotonic()
        self.records = 0
        self.batches = 0
        self.restarts = 0
        self.last_batch: int | None = None
        self.status = "starting"
        self.has_transform = has_transform
        self.passed_over = 0
        self.modified = 0
        self.replayed = 0
        #: The query stopped at once: the batch in flight (if any) was not committed.
        self.stopped_now = False
        #: Published by the batches (fused execution says; ``None`` until a batch does).
        self.records_out: int | None = None
        self.bytes_out: int | None = None
        self.files_out: int | None = None
        self.consecutive_restarts = 0
        self.last_batch_at: float | None = None
        self.status_since = time.time()
        self.batch_seconds = Histogram.empty()
        self.job_seconds = Histogram.empty()
        self.commit_seconds = Histogram.empty()

    def on_batch(self, batch: BatchProgress) -> None:
        # Histograms are values replaced whole: a scrape on another thread sees one or the other.
        self.batch_seconds = self.batch_seconds.observe(batch.duration_ms / 1000)
        if batch.job_ms is not None:
            self.job_seconds = self.job_seconds.observe(batch.job_ms / 1000)
        if batch.commit_ms is not None:
            self.commit_seconds = self.commit_seconds.observe(batch.commit_ms / 1000)
        self.last_batch_at = time.time()
        self.consecutive_restarts = 0
        if self.status != "processing":
            self.status_since = time.time()
        if self.last_batch is not None and batch.batch_id <= self.last_batch:
            # A batch run again after a restart (its commit was not recorded): counted once.
            self.replayed += batch.num_input_rows
        else:
            self.records += batch.num_input_rows
        # What a batch published is published once, whichever attempt's commit did it.
        if batch.records_out is not None:
            self.records_out = (self.records_out or 0) + batch.records_out
        if batch.bytes_out is not None:
            self.bytes_out = (self.bytes_out or 0) + batch.bytes_out
        if batch.files_out is not None:
            self.files_out = (self.files_out or 0) + batch.files_out
        if batch.passed_over is not None:
            self.passed_over = batch.passed_over
        if batch.modified is not None:
            self.modified = batch.modified
        self.batches += 1
        self.last_batch = max(batch.batch_id, self.last_batch or 0)
        self.status = "processing"

    def on_restart(self, attempt: int, error: BaseException) -> None:
        self.restarts += 1
        self.consecutive_restarts += 1
        if self.status != "restarting":
            self.status_since = time.time()
        self.status = "restarting"

    def view(
        self,
        runner: SparkSupervisor | FusedRunner | None,
        lock: CheckpointLock,
        config: PipelineConfig,
    ) -> JobView:
        """What a metrics scrape reports: the driver's view of the job (reads only)."""
        from operators.spark.fused import FusedRunner

        # Fused execution plans on this process; a streaming query plans in a Python worker
        # of the JVM, out of reach: no lag then (not a lag of 0).
        waiting = list(runner.reader.waiting) if isinstance(runner, FusedRunner) else None
        now = time.time()
        stuck = None
        stuck_after = config.metrics.bound(config.region)
        # A restarted query stays "restarting" until its next batch; in fused execution a plan
        # that found nothing waiting says it runs again and is idle, not stuck.
        idle = waiting is not None and not waiting
        if self.status == "restarting" and not idle and now - self.status_since > stuck_after:
            stuck = f"restarting for {now - self.status_since:.0f} s (bound {stuck_after:g} s)"
        # A batch in progress is never judged stuck: nothing bounds its length (a backlog
        # read in one batch may rightly take long), and a restart would run it again.
        # Fused execution knows what its batches wrote, published and left waiting in open
        # files; of a streaming query only what its commits published.
        out: dict[str, Any] = {"records_out": self.records_out, "bytes_out": self.bytes_out}
        progress = self.progress()
        if isinstance(runner, FusedRunner):
            (rows, size, files), (open_rows, open_size) = runner.published, runner.unpublished
            progress = dataclasses.replace(progress, files_out=files)
            out = {
                "records_out": rows + open_rows,
                "bytes_out": size + open_size,
                "records_published": rows,
                "bytes_published": size,
                "records_unpublished": open_rows,
                "unpublished_since": runner.unpublished_since,
            }
        return JobView(
            progress=progress,
            waiting=waiting,
            **out,
            consecutive_resets=self.consecutive_restarts,
            period_seconds=period_of(config.region),
            cut_seconds=self.batch_seconds,
            last_cut_at=self.last_batch_at,
            lock_renewed_at=lock.renewed_at,
            job_seconds=self.job_seconds,
            commit_seconds=self.commit_seconds,
            ready=self.status == "processing" or (self.status == "starting" and runner is not None),
            stuck=stuck,
        )

    def progress(self) -> Progress:
        return Progress(
            status=self.status,
            files_in=None,
            files_out=self.files_out,
            files_passed_over=self.passed_over,
            files_modified=self.modified,
            records_in=self.records,
            records_out=None if self.has_transform else self.records,
            records_replayed=self.replayed,
            records_unpublished=None if self.stopped_now else 0,
            final_cut=not self.stopped_now,
            bytes_in=None,
            cuts=self.batches,
            resets=self.restarts,
            last_cut_id=self.last_batch,
            elapsed=time.monotonic() - self.started,
        )


def run_spark(
    config: PipelineConfig,
    *,
    available_now: bool = False,
    display: ProgressDisplay | None = None,
) -> Progress:
    """Run the pipeline as a Spark streaming query until stopped (or, with ``available_now``,
    until everything present is processed); return the final progress.

    1. Check the settings for Spark and find Java (ConfigError, before anything is written).
    2. Lock the checkpoint directory and check (or stamp) its pipeline identity.
    3. Start the session and run the query under the supervisor, which restarts it from its
       checkpoint after a failure, up to ``max_consecutive_reset_attempts`` in a row.
    """
    plan = plan_spark(config)
    from operators.spark import check_pyspark
    from operators.spark.session import find_java

    check_pyspark()  # ImportError naming the version, before anything is written

    remote = config.spark.remote
    if remote is None:
        try:
            find_java()
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or run without Spark: --engine local") from None
        _check_jvm_environment(plan.jvm_env)
    else:
        _check_remote(plan, remote)
    scan_fs, scan_dir = open_path(config.scan_directory, config.filesystem)
    check_single_file(scan_fs, scan_dir, config.single_name)
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    region = config.region
    stopper = _Stop()
    lock = CheckpointLock(
        cp_fs,
        cp_dir,
        ttl=region.lock_ttl,
        permission=region.checkpoint_permission,
        # Another process may own the directory: no batch may commit after this. Spark's
        # tasks cannot be paused while the lock is unsafe (not renewed for half its ttl), so
        # the query stops then too; the next run resumes from its checkpoint.
        on_lost=lambda reason: stopper.request(immediate=True),
        on_unsafe=lambda reason: stopper.request(immediate=True),
    )
    totals = _Totals(config.transform is not None)
    runner: list[SparkSupervisor | FusedRunner] = []
    metrics = None
    if config.metrics.port is not None:
        # Before the lock: a port already taken is a configuration error, nothing has started.
        metrics = MetricsServer(
            lambda: totals.view(runner[0] if runner else None, lock, config),
            port=config.metrics.port,
            host=config.metrics.host,
            labels={"pipeline": config.pipeline_id(), "engine": "spark"},
        ).start()
    LOG_CONTEXT["cut"] = lambda: totals.last_batch
    try:
        lock.acquire()
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    tokens: DelegationToken | None = None
    try:
        job_id = claim_checkpoint_dir(
            cp_fs,
            cp_dir,
            pipeline_id=config.pipeline_id(),
            engine="spark",
            permission=region.checkpoint_permission,
            foreign_engine_files=lambda: any(
                s.name.startswith("cut-") for s in cp_fs.list_dir(cp_dir)
            ),
            own_engine_files=lambda: cp_fs.exists(posixpath.join(cp_dir, SPARK_DIR, "offsets")),
            details={**config.identity_paths(), "sink_log": plan.sink_log},
            output=JobOutput(*open_path(plan.output_dir, config.filesystem), plan.spark_checkpoint),
        )
        if config.scan.archive_dir is not None:
            archive_fs, archive_dir = open_path(config.scan.archive_dir, config.filesystem)
            watched_fs, watched = open_path(config.scan_directory, config.filesystem)
            same_fs = watched_fs.display("/") == archive_fs.display("/")
            check_after_read(
                archive_fs, config.scan.after_read, archive_dir, watched if same_fs else None
            )
        # The sink log tells this job's batches from another's by its id (operators.sink.owner).
        plan.sink_options.update(job_id=job_id, checkpointLocation=plan.spark_checkpoint)
        logger.info(
            "Pipeline %s: %s -> %s, checkpoints in %s (spark engine, %s trigger)",
            config.pipeline_id(),
            config.display(config.scan_directory),
            config.display(config.sink.template or plan.output_dir),
            config.display(config.region.checkpoint_dir),
            region.trigger.value,
        )
        if plan.delegates:
            from operators.fs.tokens import DelegationToken

            tokens = DelegationToken(config.filesystem)
            plan.secret_env[SECRET_ENV["token"]] = tokens.token
            # A replaced token reaches this process's tasks (by reference) before they run,
            # and the session's environment when it starts.
            tokens.on_new = functools.partial(_hand_token, None, plan.secret_env)
        if plan.secret_env:
            # Inherited by the JVM and its Python workers (local mode); executors of a cluster
            # get them through the session's environment (see _session and SECRET_ENV).
            os.environ.update(plan.secret_env)
        if remote is None:
            # Before the JVM starts: it inherits them (see _jvm_environment).
            os.environ.update(plan.jvm_env)
        signals = StopSignals(stopper.request, lambda: stopper.request(immediate=True))
        with signals.installed():
            spark = _session(config, plan.secret_env)
            if tokens is not None:
                tokens.on_new = functools.partial(_hand_token, spark, plan.secret_env)
                _hand_token(spark, plan.secret_env, tokens.token)  # one replaced meanwhile
            _check_jvm_user(spark, plan.jvm_env.get("HADOOP_USER_NAME"))
            # The session's conf holds the SparkConf too (classic and Spark Connect alike).
            if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
                # Files span batches: two attempts of one task would append to one file.
                msg = (
                    "[spark] conf: spark.speculation = true is not supported: the sink's files "
                    "span micro-batches, and a speculative attempt would write into the file "
                    "its twin is writing"
                )
                raise ConfigError(msg)
            restarting = functools.partial(_restarting, totals, tokens)
            supervisor = _runner(spark, plan, available_now, totals, (cp_fs, cp_dir), restarting)
            runner.append(supervisor)
            stopper.attach(supervisor)
            if display is not None:
                display.start(totals.progress)
            try:
                supervisor.run()
                totals.stopped_now = stopper.now  # before a late signal could change it
                if not stopper.now:
                    from operators.spark.fused import FusedRunner
                    from operators.spark.sink import close_open_files

                    # Files a limit kept open across batches: no batch continues them now.
                    if close_open_files(plan.sink_options) and isinstance(supervisor, FusedRunner):
                        supervisor.housekeep()  # the input behind them may leave now
                if available_now:
                    warn_files_left(
                        scan_fs,
                        config.scan,
                        scan_dir,
                        config.single_name,
                        read_any=totals.batches > 0,
                    )
            finally:
                totals.status = "stopped"
                final = totals.progress()
                if display is not None:
                    display.finish(final)
        if lock.lost is not None:
            raise LockLostError(lock.lost)
        return final
    finally:
        if tokens is not None:
            tokens.close()
        lock.release()
        if metrics is not None:
            metrics.stop()


def _hand_token(spark: SparkSession | None, secrets: dict[str, str], token: str) -> None:
    """Where the tasks read a new delegation token (:data:`SECRET_ENV`): this process's
    environment (the driver's commit, local Python workers), the secrets a session starts with,
    and the running session's environment, which travels with each job's Python function to
    the workers (a new job, or a retried batch, reads it)."""
    from operators.fs.token_file import replace_tokens

    os.environ[SECRET_ENV["token"]] = token
    secrets[SECRET_ENV["token"]] = token
    if spark is not None:
        spark.sparkContext.environment[SECRET_ENV["token"]] = token
    replace_tokens(token)  # this process's hdfs:// clients that took the old one


def _restarting(
    totals: _Totals, tokens: DelegationToken | None, attempt: int, error: BaseException
) -> None:
    """Before a failed batch or query runs again: count it, and give the tasks a new
    delegation token (the failure may be the token's: expired or cancelled)."""
    totals.on_restart(attempt, error)
    if tokens is None:
        return
    try:
        tokens.refresh()
    except OSError as err:  # the retry fails the same way and says so
        logger.error("no new delegation token before the restart: %s", err)


def _check_jvm_user(spark: SparkSession, user: str | None) -> None:
    """Warn when Spark's JVM acts as another user than ``[filesystem] user`` (a session that
    was already running when this pipeline started keeps its user)."""
    if user is None:
        return
    from operators.spark.registration import is_connect

    if is_connect(spark):
        # A Connect client cannot ask the server's JVM for its user (no sparkContext).
        logger.info(
            "Spark Connect: Spark's checkpoint files belong to the user the server acts as "
            "(its HADOOP_USER_NAME or login), which should be the [filesystem] user %r",
            user,
        )
        return
    actual = spark.sparkContext.sparkUser()
    if actual != user:
        logger.warning(
            "Spark's JVM acts as %r, not as the [filesystem] user %r (the SparkSession was "
            "started before): Spark's checkpoint files will belong to %r",
            actual,
            user,
            actual,
        )


def fused(config: PipelineConfig) -> bool:
    """Whether the pipeline may run as fused batches (see :mod:`operators.spark.fused`): unless
    ``[spark] execution = "streaming"``. A SQL transform that keeps state across batches is
    found only once Spark has parsed it, and then runs as a streaming query after all."""
    return config.spark.execution == "auto"


def _runner(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    checkpoint: tuple[FileSystem, str],
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor | FusedRunner:
    config = plan.config
    transform = config.transform
    sql = transform.sql if transform is not None else None
    if fused(config) and sql is not None:
        from operators.spark.fused import stateful_part
        from operators.spark.registration import is_connect

        if is_connect(spark):
            reason: str | None = (
                "over Spark Connect the input count of a fused batch is not observable"
            )
        else:
            node = stateful_part(spark, sql, binary=config.source.format == "binary")
            reason = None if node is None else f"it keeps state across batches ({node})"
        if reason is not None:
            check_streaming_on_yarn(config, f"[transform] sql: {reason}, a streaming query")
            logger.info("[transform] sql: %s: it runs as a streaming query", reason)
            from operators.spark import register

            register(spark)
            return _streaming(spark, plan, available_now, totals, checkpoint, on_restart)
    if not fused(config):
        return _streaming(spark, plan, available_now, totals, checkpoint, on_restart)
    from operators.spark.fused import FusedRunner, sql_transform

    function = None
    if transform is not None and transform.function is not None:
        function = load_function(transform.function, config.folder)
    cp_fs, cp_dir = checkpoint
    return FusedRunner(
        spark,
        plan.source_options,
        plan.sink_options,
        cp_fs,
        posixpath.join(cp_dir, SPARK_DIR),
        config.region,
        transform=function,
        frame=None if sql is None else sql_transform(spark, sql),
        available_now=available_now,
        on_progress=totals.on_batch,
        on_restart=on_restart,
        permission=config.region.checkpoint_permission,
    )


def _streaming(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    checkpoint: tuple[FileSystem, str],
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor:
    """A streaming query on the checkpoint, once the batch log's newest entries are closed: a
    fused run before, killed, may have left them open, which Spark's client cannot read after
    a DataNode restart (:meth:`~operators.spark.batchlog.BatchLog.seal`; the lock is held)."""
    from operators.spark.batchlog import BatchLog

    cp_fs, cp_dir = checkpoint
    BatchLog(cp_fs, posixpath.join(cp_dir, SPARK_DIR)).seal()
    return _supervisor(spark, plan, available_now, totals, on_restart)


def _supervisor(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor:
    from operators.spark.supervisor import SparkSupervisor

    config = plan.config

    def build(region_options: dict[str, str]) -> DataStreamWriter:
        reader = spark.readStream.format("hdfs_scan").options(
            **{**plan.source_options, **region_options}
        )
        frame = _transformed(spark, reader.load(), config)
        return (
            frame.writeStream.format("hdfs_sink")
            .options(**plan.sink_options)
            .option("checkpointLocation", plan.spark_checkpoint)
            .queryName(plan.query_name)
        )

    return SparkSupervisor(
        build,
        config.region,
        available_now=available_now,
        on_progress=totals.on_batch,
        on_restart=on_restart,
    )
