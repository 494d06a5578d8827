"""On a Kerberized YARN (``secure_yarn_sandbox``: ``sandbox --secure --yarn`` with delegation
tokens of 90 s): ``hdfs-region run`` in client mode, Spark logged in with the pipeline's
keytab, the executors' Python clients on hdfs:// with a delegation token that is replaced while
the run goes on."""

from __future__ import annotations

import posixpath
import re
import subprocess
import time
from pathlib import Path

import pytest

from operators.app.config import PipelineConfig, load_pipeline
from operators.app.spark_plan import SECRET_ENV, plan_spark
from operators.common.faults import FAULT_DIR_ENV, FAULT_ENV
from operators.fs import FileSystemSettings, open_path
from operators.sandbox import Sandbox
from region.errors import ConfigError
from tests.spark.drivers import kill_after_wal_while_landing, start_driver
from tests.spark.test_yarn import YarnRun

#: Each record takes a moment: a batch of one file lasts seconds, so that the run's batches
#: outlast a token the tasks use.
PACED_TRANSFORM = (
    "import time\n\n\ndef upper(value):\n    time.sleep(0.2)\n    return value.upper()\n"
)


@pytest.fixture
def secured_run(
    secure_yarn_sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> YarnRun:
    """A pipeline logged in with the sandbox's keytab; this process's Kerberos library (and the
    driver's) reads the sandbox's krb5.conf and a ticket cache of its own."""
    info = secure_yarn_sandbox.info
    assert info.principal and info.keytab and info.ca_file and info.krb5_conf
    monkeypatch.setenv("KRB5_CONFIG", info.krb5_conf)
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'ccache-none'}")
    auth = {
        "kerberos_principal": info.principal,
        "keytab": info.keytab,
        "ca_bundle": info.ca_file,
        "config_dir": info.conf_dir,
    }
    settings = FileSystemSettings.model_validate({"uri": info.hdfs, "timeout": 20.0, **auth})
    fs, base = open_path(info.hdfs + "/yarn", settings)
    root = posixpath.join(base, f"run-{time.monotonic_ns()}")
    fs.mkdirs(root)
    run = YarnRun(secure_yarn_sandbox, fs, root, tmp_path)
    # The keytab's login instead of a simple-auth user.
    lines = "\n".join(f'{k} = "{v}"' for k, v in auth.items())
    text = re.sub(r'user = ".*"\nconfig_dir = ".*"', lines, run.config.read_text())
    # One executor: a NodeManager of 3 GiB holds it beside the application master.
    one = '"spark.executor.instances" = "1"'
    run.config.write_text(text.replace('"spark.executor.instances" = "2"', one))
    (tmp_path / "yarn_transform.py").write_text(PACED_TRANSFORM)
    return run


def _batches(log: str) -> list[int]:
    """Offsets in ``log`` of each batch's line."""
    return [m.start() for m in re.finditer(r"batch \d+: \d+ records in", log)]


@pytest.mark.spark
@pytest.mark.slow
def test_run_on_kerberized_yarn_survives_kill_9_and_tokens_replaced_mid_run(
    secured_run: YarnRun,
) -> None:
    """Client mode on the Kerberized YARN: the tasks' options carry neither keytab nor
    principal, only the token's variable. The driver is SIGKILLed after a batch's write-ahead
    entry while files land; the same command run again with ``--available-now`` replaces the
    tasks' token while its batches run (each new token cancels the one before, so every later
    batch ran with a token handed on during the run), and every record is published once."""
    plan = plan_spark(load_pipeline(secured_run.config))
    for options in (plan.source_options, plan.sink_options):
        assert options["token_env"] == SECRET_ENV["token"]
        assert not {"keytab", "keytab_env", "kerberos_principal"} & set(options)
    secured_run.land(2)
    more = secured_run.more_files(2)
    faults = secured_run.work / "faults"
    faults.mkdir()
    env = secured_run.env(**{FAULT_ENV: "after_wal:1", FAULT_DIR_ENV: str(faults)})
    env.pop("HADOOP_USER_NAME")
    log = secured_run.work / "driver.log"
    driver = start_driver(secured_run.command(), env, secured_run.work, log)
    landing = posixpath.join(secured_run.root, "landing")
    kill_after_wal_while_landing(
        driver, log, faults, secured_run.fs, landing, secured_run.files, iter(more), every=3.0
    )
    env.pop(FAULT_ENV)
    secured_run.land(2)
    rerun = subprocess.run(
        secured_run.command("--available-now", "--log-level", "INFO"),
        env=env,
        cwd=secured_run.work,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    secured_run.check_exactly_once()
    # The tokens were replaced between the rerun's first and last batch.
    batches = _batches(rerun.stderr)
    assert len(batches) >= 3, rerun.stderr[-3000:]
    during = rerun.stderr[batches[0] : batches[-1]]
    assert "a new delegation token for the tasks" in during, rerun.stderr[-3000:]
    keytab = secured_run.sandbox.info.keytab
    assert keytab is not None and keytab not in rerun.stderr


def test_cluster_mode_with_a_kerberos_login_is_refused_at_start() -> None:
    """Only client mode hands the executors tokens from the driver's login."""
    config = PipelineConfig.model_validate(
        {
            "filesystem": {
                "uri": "hdfs://127.0.0.1:8020",
                "kerberos_principal": "etl@EXAMPLE.COM",
                "keytab": "/etc/etl.keytab",
            },
            "region": {"checkpoint_dir": "/ck"},
            "scan": {"directory": "/landing"},
            "sink": {"file": "/out/part-%FILENUM.txt"},
            "spark": {"master": "yarn", "deploy_mode": "cluster"},
        }
    )
    with pytest.raises(ConfigError, match=r"deploy_mode = 'cluster'.*set deploy_mode = 'client'"):
        plan_spark(config)
