"""What the Spark engine needs on a real cluster, checked without a JVM: the user and Hadoop
configuration Spark's JVM gets, where Spark keeps its checkpoint for a ``webhdfs://`` checkpoint
directory, the cluster options the data sources accept, and bytes hdfs-native can write.
(``tests/spark/test_spark_real_hdfs.py`` runs the whole command on the sandbox.)"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from operators.app.config import load_pipeline
from operators.app.spark_plan import check_jvm_environment, hdfs_uri_of_webhdfs, plan_spark
from operators.spark.arrow_io import encode_records
from operators.spark.options import scan_config, sink_config
from region.errors import ConfigError


def hadoop_conf(directory: Path, core: dict[str, str], hdfs: dict[str, str]) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    for name, props in (("core-site.xml", core), ("hdfs-site.xml", hdfs)):
        body = "".join(
            f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items()
        )
        (directory / name).write_text(f"<configuration>{body}</configuration>")
    return str(directory)


def test_the_rpc_address_of_a_webhdfs_cluster_comes_from_its_configuration(
    tmp_path: Path,
) -> None:
    # The sandbox's client configuration.
    plain = hadoop_conf(
        tmp_path / "plain",
        {"fs.defaultFS": "hdfs://127.0.0.1:36471"},
        {
            "dfs.namenode.http-address": "127.0.0.1:44333",
            "dfs.namenode.rpc-address": "127.0.0.1:36471",
        },
    )
    assert hdfs_uri_of_webhdfs([("127.0.0.1", 44333)], plain) == "hdfs://127.0.0.1:36471"
    assert hdfs_uri_of_webhdfs([("127.0.0.1", 9870)], plain) is None  # another cluster
    # A server-style configuration: wildcard addresses.
    wildcard = hadoop_conf(
        tmp_path / "wildcard",
        {"fs.defaultFS": "hdfs://nn.example.com:8020"},
        {"dfs.namenode.http-address": "0.0.0.0:9870", "dfs.namenode.rpc-address": "0.0.0.0:8020"},
    )
    assert hdfs_uri_of_webhdfs([("nn.example.com", 9870)], wildcard) == (
        "hdfs://nn.example.com:8020"
    )
    # No HTTP address: the NameNode of fs.defaultFS, when the host is the same.
    default_only = hadoop_conf(tmp_path / "default", {"fs.defaultFS": "hdfs://nn:8020"}, {})
    assert hdfs_uri_of_webhdfs([("nn", 9870)], default_only) == "hdfs://nn:8020"
    assert hdfs_uri_of_webhdfs([("other", 9870)], default_only) is None
    # HA: the name service whose NameNodes serve those HTTP addresses.
    ha = hadoop_conf(
        tmp_path / "ha",
        {"fs.defaultFS": "hdfs://prod"},
        {
            "dfs.nameservices": "prod",
            "dfs.ha.namenodes.prod": "nn1,nn2",
            "dfs.namenode.http-address.prod.nn1": "a:9870",
            "dfs.namenode.http-address.prod.nn2": "b:9870",
            "dfs.namenode.rpc-address.prod.nn1": "a:8020",
            "dfs.namenode.rpc-address.prod.nn2": "b:8020",
        },
    )
    assert hdfs_uri_of_webhdfs([("a", 9870), ("b", 9870)], ha) == "hdfs://prod"
    assert hdfs_uri_of_webhdfs([("a", 9870)], None) is None


def write_config(tmp_path: Path, filesystem: str, checkpoint_dir: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        textwrap.dedent(f"""\
        engine = "spark"
        [filesystem]
        {filesystem}
        [region]
        checkpoint_dir = "{checkpoint_dir}"
        [scan]
        directory = "/landing"
        [sink]
        file = "/out/part-%FILENUM.txt"
        """)
    )
    return path


def test_a_webhdfs_checkpoint_is_kept_by_spark_through_hdfs_on_the_same_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    conf = hadoop_conf(
        tmp_path / "conf",
        {"fs.defaultFS": "hdfs://nn:8020"},
        {"dfs.namenode.http-address": "nn:9870", "dfs.namenode.rpc-address": "nn:8020"},
    )
    fs = f'uri = "webhdfs://nn:9870"\nuser = "etl"\nconfig_dir = "{conf}"'
    plan = plan_spark(load_pipeline(write_config(tmp_path, fs, "webhdfs://nn:9870/cp/orders")))
    assert plan.spark_checkpoint == "hdfs://nn:8020/cp/orders/spark"
    # Spark's JVM acts as our user, with our Hadoop configuration.
    assert plan.jvm_env == {"HADOOP_USER_NAME": "etl", "HADOOP_CONF_DIR": conf}
    # The data sources get the cluster options too (they were refused as unknown).
    assert scan_config(CaseInsensitiveDict(plan.source_options)).fs is not None
    assert sink_config(CaseInsensitiveDict(plan.sink_options)).fs is not None
    assert plan.source_options["plan_dir"] == "webhdfs://nn:9870/cp/orders/plans"

    # Without the cluster's configuration: refused before anything starts, saying what to do.
    path = write_config(tmp_path, 'uri = "webhdfs://nn:9870"', "webhdfs://nn:9870/cp/orders")
    with pytest.raises(ConfigError, match=r"\[region\] checkpoint_dir: .*config_dir"):
        plan_spark(load_pipeline(path))


def test_the_jvm_user_is_the_configured_one_or_the_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = 'uri = "hdfs://nn:8020"\nuser = "etl"'
    plan = plan_spark(load_pipeline(write_config(tmp_path, fs, "hdfs://nn:8020/cp")))
    assert plan.spark_checkpoint == "hdfs://nn:8020/cp/spark"
    assert plan.jvm_env == {"HADOOP_USER_NAME": "etl"}
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    check_jvm_environment(plan.jvm_env)
    monkeypatch.setenv("HADOOP_USER_NAME", "someone")
    with pytest.raises(ConfigError, match="user: 'etl' conflicts with HADOOP_USER_NAME"):
        check_jvm_environment(plan.jvm_env)
    # Kerberos: the JVM logs in on its own; no simple-auth user is forced on it.
    kerberos = fs + '\nkerberos_principal = "etl@EXAMPLE.COM"'
    plan = plan_spark(load_pipeline(write_config(tmp_path, kerberos, "hdfs://nn:8020/cp")))
    assert plan.jvm_env == {}


def test_records_reach_the_filesystem_as_unsigned_bytes() -> None:
    # hdfs-native reads the items of a buffer as u8: Arrow's signed-byte views of non-ASCII
    # text or binary data failed on hdfs:// with "OverflowError: number too small".
    text = encode_records(pa.array(["x", "\u00e9t\u00e9", None]).slice(1), binary=False)
    assert [memoryview(b).format for b in text] == ["B", "B"]
    assert b"".join(bytes(b) for b in text) == "\u00e9t\u00e9\n\n".encode()
    blob = encode_records(pa.array([b"\x00", b"\xff\x80"]).slice(1), binary=True)
    assert [memoryview(b).format for b in blob] == ["B"]
    assert bytes(blob[0]) == b"\xff\x80"


def test_the_plan_log_stays_with_a_local_checkpoint_when_the_scan_reads_webhdfs(
    tmp_path: Path,
) -> None:
    # Never in the landing directory: with the checkpoint, on whatever filesystem that is.
    cp = tmp_path / "cp"
    path = write_config(tmp_path, 'uri = "webhdfs://nn:9870"\nuser = "etl"', f"file://{cp}")
    plan = plan_spark(load_pipeline(path))
    assert plan.source_options["plan_dir"] == f"file://{cp}/plans"
    scan = scan_config(CaseInsensitiveDict(plan.source_options))
    assert scan.directory == "/landing" and scan.fs is not None  # the scan reads WebHDFS
    assert scan.plan_dir == f"{cp}/plans" and scan.plan_fs is not None
    assert scan.plan_fs.uri == "file:///"
