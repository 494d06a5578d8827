"""``[spark] deploy_mode = "cluster"`` on YARN: the driver runs in the application master.

``hdfs-region run`` on the submitting host does not run the pipeline: it checks the settings
(as for any Spark run), then hands the same command to ``spark-submit --deploy-mode cluster``
and waits for the application:

1. Check the settings (:func:`plan_spark`: ConfigError before anything is submitted) and pack
   the containers' environment (:mod:`operators.spark.yarn`), staged on the cluster.
2. Submit ``operators/app/__main__.py run <settings file> --no-progress`` (the settings file
   travels with the application through ``--files``; the environment's ``bin/python`` runs it)
   with :data:`DRIVER_ENV` set in the application master, where the same command then runs the
   pipeline in place, and :data:`RESULT_ENV` naming a file on the cluster.
3. The command in the application master writes its exit code and its error lines there
   (:func:`record_result`); the submitter prints them and exits with that code. Without a
   result (the application master was killed, or never started), it says so with the end of
   spark-submit's output and exits 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from operators.app.config import PipelineConfig
from operators.app.console import EXIT_FAILURE, error
from operators.fs import FileSystemSettings, open_path
from region.errors import ConfigError

__all__ = ["DRIVER_ENV", "RESULT_ENV", "is_cluster_submit", "record_result", "submit"]

logger = logging.getLogger(__name__)

#: Set in the application master: the command runs the pipeline there, never submits again.
DRIVER_ENV = "HDFS_REGION_YARN_DRIVER"
#: Set in the application master: where the command writes ``{"code": …, "errors": […]}``.
RESULT_ENV = "HDFS_REGION_YARN_RESULT"
#: Results of cluster-mode runs, on ``fs.defaultFS``.
RESULT_DIR = "/tmp/hdfs-region/yarn-results"


def is_cluster_submit(config: PipelineConfig) -> bool:
    """Whether this command submits the pipeline to YARN instead of running it."""
    from operators.spark.yarn import is_yarn_master

    spark = config.spark
    return (
        config.engine == "spark"
        and is_yarn_master(spark.master)
        and spark.deploy_mode == "cluster"
        and not os.environ.get(DRIVER_ENV)
    )


def _default_fs(config: PipelineConfig) -> tuple[str, FileSystemSettings]:
    from operators.fs.hadoop_conf import default_fs

    conf_dir = config.filesystem.config_dir or os.environ.get("HADOOP_CONF_DIR")
    found = default_fs(conf_dir) if conf_dir else None
    if found is None or not found[0].startswith("hdfs://"):
        msg = (
            "[spark] deploy_mode = 'cluster': the Hadoop configuration ([filesystem] config_dir "
            "or HADOOP_CONF_DIR) names no hdfs:// fs.defaultFS for the application's files"
        )
        raise ConfigError(msg)
    return found[0], config.filesystem.model_copy(update={"uri": found[0]})


def submit(config: PipelineConfig, available_now: bool, *, stream: TextIO | None = None) -> int:
    """Run the pipeline as a YARN application in cluster mode; its exit code (see the module
    docstring)."""
    import subprocess

    from operators.app.spark_plan import plan_spark
    from operators.spark.session import DEFAULT_CONF
    from operators.spark.standalone import spark_home
    from operators.spark.yarn import pyspark_archives, stage_archive, yarn_conf

    plan = plan_spark(config)  # 1.
    uri, fs_settings = _default_fs(config)
    fs, _ = open_path(uri, fs_settings)
    stage: Callable[[Path], str] = lambda archive: stage_archive(  # noqa: E731
        fs, "/tmp/hdfs-region/yarn-env", archive
    )
    settings = {**DEFAULT_CONF, "spark.yarn.maxAppAttempts": "1", **config.spark.conf}
    settings = {**yarn_conf(settings, stage), **settings}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", DRIVER_ENV)}
    env.update(plan.jvm_env)
    saved = os.environ.get("PYSPARK_ARCHIVES_PATH")
    pyspark_archives(settings)
    if os.environ.get("PYSPARK_ARCHIVES_PATH"):
        env["PYSPARK_ARCHIVES_PATH"] = os.environ["PYSPARK_ARCHIVES_PATH"]
    if saved is None:
        os.environ.pop("PYSPARK_ARCHIVES_PATH", None)
    result = f"{RESULT_DIR}/{uuid.uuid4().hex}.json"
    fs.mkdirs(RESULT_DIR, permission=0o755)
    settings[f"spark.yarn.appMasterEnv.{DRIVER_ENV}"] = "1"
    settings[f"spark.yarn.appMasterEnv.{RESULT_ENV}"] = f"{uri.rstrip('/')}{result}"
    if "HADOOP_USER_NAME" in plan.jvm_env:
        settings["spark.yarn.appMasterEnv.HADOOP_USER_NAME"] = plan.jvm_env["HADOOP_USER_NAME"]
    settings.setdefault("spark.app.name", f"hdfs-region {config.pipeline_id()}")
    path = Path(config.path).resolve()
    main = Path(__file__).with_name("__main__.py")
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", "yarn"]
    command += ["--deploy-mode", "cluster", "--files", str(path)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(main), "run", path.name, "--no-progress"]
    if available_now:
        command.append("--available-now")
    logger.info("submitting %s to YARN in cluster mode (result: %s)", path.name, result)
    # 2. spark-submit reports the application's state every second: kept out of the way.
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    logger.debug("spark-submit output:\n%s", done.stderr)
    # 3.
    try:
        answer = json.loads(fs.read(result))
    except FileNotFoundError:
        tail = "; ".join(
            line.strip()
            for line in done.stderr.splitlines()
            if "diagnostics" in line or "Exception" in line
        )[-1500:]
        error(
            f"the YARN application ended without a result (spark-submit exit "
            f"{done.returncode}): {tail or done.stderr.strip()[-1500:]}",
            stream,
        )
        return EXIT_FAILURE
    with contextlib.suppress(OSError):
        fs.delete(result)
    for line in answer.get("errors", []):
        print(line, file=stream or sys.stderr)
    code: int = int(answer["code"])
    return code


class _Tee(io.TextIOBase):
    """Passes text on and keeps the command's own lines (``hdfs-region: …`` and the indented
    lines of a configuration error)."""

    def __init__(self, target: TextIO, prefix: str) -> None:
        self.target = target
        self.prefix = prefix
        self.kept: list[str] = []
        self._partial = ""
        self._in_error = False

    def write(self, text: str) -> int:
        self.target.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(self.prefix):
                self.kept.append(line)
                self._in_error = line.endswith(":")
            elif self._in_error and line.startswith("  "):
                self.kept.append(line)
            else:
                self._in_error = False
        return len(text)

    def flush(self) -> None:
        self.target.flush()


def record_result(run: Callable[[], int]) -> int:
    """``run()`` in the application master: its exit code and error lines written to
    :data:`RESULT_ENV` (when set) for the submitter."""
    target = os.environ.get(RESULT_ENV)
    if not target:
        return run()
    from operators.app.console import PROG

    tee = _Tee(sys.stderr, f"{PROG}: ")
    code = 1
    try:
        with contextlib.redirect_stderr(tee):
            code = run()
    finally:
        fs, path = open_path(target)
        body = json.dumps({"code": code, "errors": tee.kept}).encode()
        writer = fs.create(path, overwrite=True, permission=0o600)
        writer.write(body)
        writer.close()
    return code
