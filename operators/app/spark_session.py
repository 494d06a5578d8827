"""The Spark session of a run: local mode, a cluster or YARN (the packed environment staged
once), or Spark Connect; the JVM logged in with the keytab, and the checks that need the
session (the JVM's Hadoop user, a delegation token handed to the tasks)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from operators.app.config import PipelineConfig
from operators.app.console import log_format
from operators.fs import open_path
from region.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from operators.app.spark_plan import SECRET_ENV, SparkPlan, fused

__all__ = ["YARN_ENV_DIR", "check_jvm_user", "check_remote", "hand_token", "start_session"]

logger = logging.getLogger(__name__)


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


def check_remote(plan: SparkPlan, remote: str) -> None:
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


def start_session(config: PipelineConfig, secrets: dict[str, str]) -> SparkSession:
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
        class_data=config.spark.class_data_archive,
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


def hand_token(spark: SparkSession | None, secrets: dict[str, str], token: str) -> None:
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


def check_jvm_user(spark: SparkSession, user: str | None) -> None:
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
