"""The IBM connection settings: fs.defaultFS of the Hadoop configuration as the default uri,
``credentials`` / ``credFile``, ``hdfsPassword``, the reconnection policy's settings."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.app.config import PipelineConfigError, load_pipeline
from operators.fs import FileSystemSettings, LocalFileSystem, open_filesystem, open_path
from operators.fs.settings import MAX_RETRY_DELAY
from operators.fs.waits import retry_delay

SECRET = "pa55-w0rd-never-shown"

_HA_SITE = """<configuration>
<property><name>dfs.nameservices</name><value>prod</value></property>
<property><name>dfs.ha.namenodes.prod</name><value>nn1,nn2</value></property>
<property><name>dfs.namenode.rpc-address.prod.nn1</name><value>h1:8020</value></property>
<property><name>dfs.namenode.rpc-address.prod.nn2</name><value>h2:8020</value></property>
</configuration>
"""


def hadoop_conf(directory: Path, default_fs: str | None, *, ha: bool = False) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    prop = (
        f"<property><name>fs.defaultFS</name><value>{default_fs}</value></property>"
        if default_fs is not None
        else ""
    )
    (directory / "core-site.xml").write_text(f"<configuration>{prop}</configuration>\n")
    if ha:
        (directory / "hdfs-site.xml").write_text(_HA_SITE)
    return directory


# -- fs.defaultFS ------------------------------------------------------------------------


def test_no_uri_takes_fs_default_fs_of_config_dir_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    conf = hadoop_conf(tmp_path / "ha-conf", "hdfs://prod", ha=True)
    with caplog.at_level(logging.INFO, logger="operators.fs.settings"):
        settings = FileSystemSettings.model_validate({"configPath": str(conf)})
    assert (settings.uri, settings.kind) == ("hdfs://prod", "hdfs")
    assert settings.display("/landing") == "hdfs://prod/landing"  # a name service: no port
    [record] = [r for r in caplog.records if "fs.defaultFS" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert "hdfs://prod" in record.getMessage()
    assert str(conf / "core-site.xml") in record.getMessage()


def test_hadoop_conf_dir_names_the_default_only_when_no_uri_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = hadoop_conf(tmp_path / "conf", "webhdfs://nn:9870")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    assert FileSystemSettings().uri == "webhdfs://nn:9870"
    assert FileSystemSettings(uri="file:///").kind == "local"
    assert FileSystemSettings(hdfsUri="hdfs://other:8020").uri == "hdfs://other:8020"
    # None means the local disk, whatever HADOOP_CONF_DIR says.
    assert isinstance(open_filesystem(None), LocalFileSystem)
    fs, path = open_path("/tmp/x")
    assert isinstance(fs, LocalFileSystem) and path == "/tmp/x"


def test_a_configuration_without_a_cluster_leaves_the_local_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hadoop_conf(tmp_path / "a", None)))
    assert FileSystemSettings().kind == "local"
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hadoop_conf(tmp_path / "b", "file:///")))
    assert FileSystemSettings().kind == "local"
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "missing"))
    assert FileSystemSettings().kind == "local"  # as Hadoop's client: ignored


def test_a_bad_config_dir_or_default_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    missing = tmp_path / "nowhere"
    with pytest.raises(ValidationError, match=rf"config_dir: '{missing}' is not a directory"):
        FileSystemSettings(config_dir=str(missing))
    conf = hadoop_conf(tmp_path / "viewfs", "viewfs://cluster")
    with pytest.raises(ValidationError, match=r"fs.defaultFS 'viewfs://cluster' of .*core-site"):
        FileSystemSettings(config_dir=str(conf))


def test_the_pipeline_file_follows_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[filesystem] config_dir`` is taken from the settings file's folder when relative."""
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.chdir("/")
    hadoop_conf(tmp_path / "hadoop", "hdfs://prod", ha=True)
    toml = tmp_path / "p.toml"
    toml.write_text(
        '[scan]\ndirectory = "/landing"\n[sink]\nfile = "/out/part-%FILENUM.txt"\n'
        '[filesystem]\nconfig_dir = "hadoop"\nuser = "etl"\n'
    )
    config = load_pipeline(toml)
    assert config.filesystem.uri == "hdfs://prod"
    assert config.filesystem.config_dir == str(tmp_path / "hadoop")
    assert config.display(config.scan_directory) == "hdfs://prod/landing"


# -- credentials / credFile / hdfsPassword ------------------------------------------------


def test_ibm_credentials_json_fills_user_password_and_uri() -> None:
    creds = json.dumps({"user": "clsadmin", "password": SECRET, "webhdfs": "webhdfs://gw:8443"})
    settings = FileSystemSettings.model_validate({"credentials": creds})
    assert (settings.uri, settings.user) == ("webhdfs://gw:8443", "clsadmin")
    assert settings.password is not None and settings.password.get_secret_value() == SECRET
    assert settings.credentials is None  # read, not kept
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert SECRET not in text
    # IBM's other spellings of the keys.
    other = json.dumps({"hdfsUser": "u", "hdfsPassword": SECRET, "hdfsUri": "webhdfs://gw:1"})
    assert FileSystemSettings.model_validate({"credentials": other}).user == "u"


def test_cred_file_is_read_and_its_errors_name_the_file_not_the_secret(tmp_path: Path) -> None:
    good = tmp_path / "creds.json"
    good.write_text(json.dumps({"user": "etl", "password": SECRET}))
    settings = FileSystemSettings.model_validate(
        {"credFile": str(good), "uri": "webhdfs://nn:9870"}
    )
    assert settings.user == "etl" and settings.password is not None
    bad = tmp_path / "bad.json"
    bad.write_text('{"user": "etl", "password": "' + SECRET)
    with pytest.raises(ValidationError) as info:
        FileSystemSettings.model_validate({"credFile": str(bad)})
    assert f"credFile: '{bad}' is not JSON (line 1" in str(info.value)
    assert SECRET not in str(info.value)
    with pytest.raises(ValidationError, match=r"credFile: '.*missing.json' cannot be read"):
        FileSystemSettings.model_validate({"credFile": str(tmp_path / "missing.json")})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"credentials": json.dumps({"user": "a"}), "hdfsUser": "a"},
            "credentials sets user, and hdfsUser is given too: keep one",
        ),
        (
            {"credentials": json.dumps({"password": SECRET}), "password": SECRET},
            "credentials sets password, and password is given too",
        ),
        (
            {"credentials": json.dumps({"user": "a", "hdfsUser": "b"})},
            "credentials sets user twice",
        ),
        ({"credentials": json.dumps({"pasword": SECRET})}, r"unknown keys \['pasword'\]"),
        ({"credentials": json.dumps([SECRET])}, "is not a JSON object"),
        ({"credentials": "{}", "credFile": "/x.json"}, "credentials: set together with credFile"),
    ],
)
def test_credentials_are_refused_clearly(data: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        FileSystemSettings.model_validate(data)
    assert SECRET not in str(info.value)


def test_hdfs_password_is_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = FileSystemSettings.model_validate(
        {"uri": "webhdfs://nn:9870", "hdfsUser": "u", "hdfsPassword": SECRET}
    )
    assert settings.password is not None and settings.password.get_secret_value() == SECRET
    # An explicit hdfsPassword wins over password_env, as password does.
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    FileSystemSettings.model_validate(
        {"uri": "webhdfs://nn:9870", "hdfsPassword": SECRET, "password_env": "NOT_SET_ANYWHERE"}
    )


def test_a_pipeline_file_never_shows_the_credentials(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    creds = json.dumps({"user": "etl", "password": SECRET, "webhdfs": "webhdfs://gw:1"})
    toml.write_text(
        '[scan]\ndirectory = "/landing"\n[sink]\nfile = "/out/part-%FILENUM.txt"\n'
        f"[filesystem]\ncredentials = '{creds}'\nhdfsUser = \"etl\"\n"
    )
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline(toml)
    assert "credentials sets user, and hdfsUser is given too" in str(info.value)
    assert SECRET not in str(info.value)


# -- reconnection policy -------------------------------------------------------------------


def test_reconnection_policy_and_its_ibm_names() -> None:
    ibm = FileSystemSettings.model_validate(
        {"reconnectionPolicy": "BoundedRetry", "reconnectionBound": 5, "reconnectionInterval": 10}
    )
    assert (ibm.max_retries, ibm.retry_backoff) == (5, 10.0)
    assert FileSystemSettings(reconnection_policy="NoRetry").max_retries == 0
    assert FileSystemSettings(reconnection_policy="InfiniteRetry").max_retries is None
    with pytest.raises(ValidationError, match="retries: 3 contradicts reconnection_policy"):
        FileSystemSettings(reconnection_policy="NoRetry", retries=3)
    with pytest.raises(ValidationError, match=r"reconnectionPolicy\n  Input should be .NoRetry"):
        FileSystemSettings.model_validate({"reconnectionPolicy": "Sometimes"})


@given(backoff=st.floats(0, 100), attempt=st.integers(1, 100_000))
def test_the_pause_between_attempts_doubles_up_to_a_cap(backoff: float, attempt: int) -> None:
    delay = retry_delay(backoff, attempt)
    assert 0 <= delay <= MAX_RETRY_DELAY
    if attempt <= 900:
        assert delay == min(backoff * 2.0 ** (attempt - 1), MAX_RETRY_DELAY)
    assert retry_delay(backoff, attempt + 1) >= delay
    assert retry_delay(backoff, 1) == min(backoff, MAX_RETRY_DELAY)
