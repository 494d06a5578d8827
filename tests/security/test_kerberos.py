"""A secured cluster (``sandbox --secure``: Kerberos RPC, SASL data transfer, HTTPS-only
WebHDFS with its own CA): a job with the right keytab gets in through ``hdfs://`` and
``swebhdfs://`` and is exactly-once across a SIGKILL; a job without the right credentials is
kept out with one line naming what is wrong and what to do, and writes nothing."""

from __future__ import annotations

import posixpath
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from operators.app.config import load_pipeline
from operators.app.spark_plan import SECRET_ENV, plan_spark
from operators.fs import FileSystemSettings, WebHdfsFileSystem, open_path
from operators.sandbox import Sandbox
from region.fs import FileSystem
from tests.cli.conftest import cli, cli_env, wait_for
from tests.cli.test_real_hdfs import ClusterPipeline
from tests.security.test_secrets import assert_clean

pytestmark = pytest.mark.slow

BACKENDS = ["hdfs", "swebhdfs"]

CONFIG = """\
engine = "local"
[filesystem]
uri = "{uri}"
{auth}
timeout = "20s"
retries = 2
retry_backoff = "200ms"
lease_recovery_timeout = "60s"
[region]
trigger = "periodic"
period = "100ms"
checkpoint_dir = "{root}/checkpoints"
max_consecutive_reset_attempts = 20
[scan]
directory = "{root}/landing"
[transform]
function = "pace:shout"
[sink]
file = "{root}/out/part-%FILENUM.txt"
tuples_per_file = 40
"""

PACE = (
    "import os, time\n"
    "PACE = float(os.environ.get('PACE', '0'))\n"
    "def shout(record):\n"
    "    if PACE:\n"
    "        time.sleep(PACE)\n"
    "    return record.upper()\n"
)


def _uri(sandbox: Sandbox, backend: str) -> str:
    return sandbox.info.hdfs if backend == "hdfs" else sandbox.info.webhdfs


def _auth(sandbox: Sandbox, backend: str, **fields: str | None) -> dict[str, str]:
    """The [filesystem] settings of a job: the sandbox's user and keytab unless overridden
    (``None`` leaves a setting out); the cluster's configuration or CA."""
    info = sandbox.info
    values: dict[str, str | None] = {
        "kerberos_principal": info.principal,
        "keytab": info.keytab,
        "ca_bundle": info.ca_file,
    }
    if backend == "hdfs":
        values["config_dir"] = info.conf_dir
    values.update(fields)
    return {k: v for k, v in values.items() if v is not None}


def admin_fs(sandbox: Sandbox, backend: str) -> tuple[FileSystem, str]:
    """The tests' own view of the cluster: the user's keytab."""
    uri = _uri(sandbox, backend)
    settings = FileSystemSettings.model_validate(
        {"uri": uri, "timeout": 20.0, "retry_backoff": 0.2, **_auth(sandbox, backend)}
    )
    return open_path(uri + "/tests", settings)


def _job(
    sandbox: Sandbox, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[ClusterPipeline, Callable[..., Path]]:
    fs, base = admin_fs(sandbox, backend)
    name = request.node.name.replace("[", "-").replace("]", "")
    root = posixpath.join(base, f"{name}-{time.monotonic_ns()}")
    fs.mkdirs(posixpath.join(root, "landing"))
    (tmp_path / "pace.py").write_text(PACE)
    config = tmp_path / "pipeline.toml"

    def write_config(**fields: str | None) -> Path:
        auth = "\n".join(f'{k} = "{v}"' for k, v in _auth(sandbox, backend, **fields).items())
        config.write_text(CONFIG.format(uri=_uri(sandbox, backend), auth=auth, root=root))
        return config

    return ClusterPipeline(fs, root, config), write_config


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_client_without_kerberos_is_refused(secure_sandbox: Sandbox, backend: str) -> None:
    """No ticket, no keytab: the cluster lets nothing through, and the error says so."""
    uri = _uri(secure_sandbox, backend)
    settings = FileSystemSettings.model_validate(
        {
            "uri": uri,
            "retries": 0,
            **_auth(secure_sandbox, backend, kerberos_principal=None, keytab=None),
        }
    )
    with pytest.raises(PermissionError) as caught:
        fs, _ = open_path(uri + "/tests", settings)
        fs.list_dir("/")
    message = str(caught.value)
    assert "Kerberos" in message and "kinit" in message, message


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_right_keytab_runs_exactly_once_across_sigkill(
    secure_sandbox: Sandbox, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pipe, write_config = _job(secure_sandbox, backend, tmp_path, request)
    for _ in range(4):
        pipe.add_file(50)
    config = write_config()
    command = ("run", str(config), "--available-now", "--no-progress", "--log-level", "DEBUG")
    # A log at DEBUG fills a pipe: it goes to a file.
    log_file = tmp_path / "killed.log"
    with log_file.open("w") as log_out:
        running = subprocess.Popen(
            [sys.executable, "-m", "operators.app", *command],
            cwd=tmp_path,
            env=cli_env(PACE="0.004"),
            stdout=subprocess.DEVNULL,
            stderr=log_out,
            text=True,
        )
    try:
        wait_for(
            lambda: len(pipe.published()) >= 40,
            timeout=120,
            what="40 published records",
            alive=running,
        )
        time.sleep(0.15)  # in the middle of the next file
        running.send_signal(signal.SIGKILL)
        running.wait(timeout=30)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert pipe.published() == pipe.expected()[: len(pipe.published())]
    pipe.add_file(30)  # a file lands while the job is down
    done = cli(*command, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pipe.published() == pipe.expected()  # every record once, in the scan's order
    assert pipe.hidden_outputs() == []
    # The keytab's path is a secret: no log at DEBUG, inspect or checkpoint file shows it.
    shown = cli("inspect", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "cut" in shown.stdout
    checkpoints = posixpath.join(pipe.root, "checkpoints")
    files = [s.path for s in pipe.fs.list_dir(checkpoints) if not s.is_dir]
    assert files
    keytab = secure_sandbox.info.keytab
    assert keytab is not None
    texts = [log_file.read_text(), done.stderr, shown.stdout + shown.stderr]
    texts += [pipe.fs.read(path).decode(errors="replace") for path in files]
    for text in texts:
        assert keytab not in text


def _expired_ticket(sandbox: Sandbox, cache: Path) -> None:
    """A ticket cache whose ticket has run out: a 5-second ticket, waited out."""
    env = {"KRB5CCNAME": f"FILE:{cache}"}
    info = sandbox.info
    assert info.keytab is not None and info.principal is not None
    subprocess.run(
        ["kinit", "-l", "5s", "-kt", info.keytab, info.principal],
        env={**_krb_env(sandbox), **env},
        check=True,
        capture_output=True,
    )
    wait_for(
        lambda: subprocess.run(["klist", "-s"], env={**_krb_env(sandbox), **env}).returncode != 0,
        timeout=60,
        what="the ticket to expire",
    )


def _krb_env(sandbox: Sandbox) -> dict[str, str]:
    import os

    assert sandbox.info.krb5_conf is not None
    return {**os.environ, "KRB5_CONFIG": sandbox.info.krb5_conf}


# (case, settings changed, what the one line must say)
REFUSALS = {
    "no-ticket": ({"keytab": None}, "no Kerberos ticket"),
    "wrong-principal": ({"kerberos_principal": "nobody@EXAMPLE.COM"}, "no key for nobody@"),
    "wrong-keytab": ({"keytab": "intruder"}, "no key for tester@"),
    "expired-ticket": ({"keytab": None}, "has expired"),
    "untrusted-ca": ({"ca_bundle": None}, "not trusted"),
}


@pytest.mark.parametrize(
    ("backend", "case"),
    # hdfs:// RPC has no TLS: the CA matters to swebhdfs:// only.
    [(b, c) for b in BACKENDS for c in REFUSALS if not (b == "hdfs" and c == "untrusted-ca")],
)
def test_a_job_without_the_right_credentials_is_kept_out(
    secure_sandbox: Sandbox,
    backend: str,
    case: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Exit 1, one line naming what is wrong and what to do, nothing written."""
    changes, expected = REFUSALS[case]
    fields = dict(changes)
    if fields.get("keytab") == "intruder":
        fields["keytab"] = secure_sandbox.info.raw["intruder_keytab"]
    pipe, write_config = _job(secure_sandbox, backend, tmp_path, request)
    pipe.add_file(10)
    config = write_config(**fields)
    cache = tmp_path / "ccache"
    if case == "expired-ticket":
        _expired_ticket(secure_sandbox, cache)
    done = cli(
        "run",
        str(config),
        "--available-now",
        "--no-progress",
        cwd=tmp_path,
        KRB5CCNAME=f"FILE:{cache}",
    )
    assert done.returncode == 1, done.stderr[-3000:]
    # One line says what is wrong (the run's start may be logged at INFO before it).
    lines = [ln for ln in done.stderr.strip().splitlines() if " INFO " not in ln]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("hdfs-region: error: PermissionError"), lines[0]
    assert expected in lines[0], lines[0]
    assert_clean(done.stderr, "the error")
    keytab = secure_sandbox.info.keytab
    assert keytab is not None and keytab not in done.stderr
    # Nothing written: no output, no checkpoint.
    names = [s.name for s in pipe.fs.list_dir(pipe.root)]
    assert names == ["landing"], names


def test_hdfs_without_the_ca_of_its_webhdfs_is_refused_at_start(
    secure_sandbox: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """hdfs:// truncates through the cluster's HTTPS WebHDFS, first needed when a run recovers
    after a crash: without the CA that signed its certificate the job is refused at start
    (exit 2, one line naming the address and ca_bundle), not at its first recovery."""
    pipe, write_config = _job(secure_sandbox, "hdfs", tmp_path, request)
    pipe.add_file(10)
    config = write_config(ca_bundle=None)
    done = cli("run", str(config), "--available-now", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.strip().splitlines() if " INFO " not in ln]
    assert len(lines) == 1, done.stderr
    http = secure_sandbox.info.raw["http"][0]
    assert lines[0].startswith("hdfs-region: configuration error:"), lines[0]
    assert "not trusted" in lines[0] and "ca_bundle" in lines[0] and http in lines[0], lines[0]
    names = [s.name for s in pipe.fs.list_dir(pipe.root)]
    assert names == ["landing"], names


def test_a_long_run_logs_in_again_from_the_keytab_when_its_ticket_runs_out(
    secure_sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tickets of 10 seconds (the client's krb5.conf asks for no more): the same filesystem
    goes on working after its ticket expired, because GSSAPI gets a new one from the keytab.
    WebHDFS's session cookie would hide the ticket; it is dropped, as when it expires."""
    info = secure_sandbox.info
    assert info.krb5_conf is not None and info.keytab is not None and info.principal
    short = tmp_path / "krb5-short.conf"
    short.write_text(
        Path(info.krb5_conf)
        .read_text()
        .replace("[libdefaults]\n", "[libdefaults]\n    ticket_lifetime = 10s\n", 1)
    )
    monkeypatch.setenv("KRB5_CONFIG", str(short))
    webhdfs, base = admin_fs(secure_sandbox, "swebhdfs")
    native, _ = admin_fs(secure_sandbox, "hdfs")
    webhdfs.mkdirs(base)
    # A ticket got at the same time, from the same keytab: when it has run out, so has theirs.
    witness = tmp_path / "witness"
    env = {**_krb_env(secure_sandbox), "KRB5_CONFIG": str(short), "KRB5CCNAME": f"FILE:{witness}"}
    subprocess.run(["kinit", "-kt", info.keytab, info.principal], env=env, check=True)
    native.status(base)
    webhdfs.status(base)
    wait_for(
        lambda: subprocess.run(["klist", "-s"], env=env).returncode != 0,
        timeout=60,
        what="the 10-second ticket to expire",
    )
    webhdfs.client._session.cookies.clear()  # type: ignore[attr-defined]
    path = posixpath.join(base, f"after-expiry-{time.monotonic_ns()}")
    writer = webhdfs.create(path)
    writer.write(b"still in")
    writer.close()
    assert native.read(path) == b"still in"


def test_a_delegation_token_lets_a_job_without_a_keytab_in_until_it_is_cancelled(
    secure_sandbox: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What a Spark task gets: no keytab, a delegation token by the secret environment variable
    (``token_env``, as the spark engine passes secrets). It runs; once the token is refused
    (cancelled: the NameNode's answer for an expired one too), the run ends with one line and
    writes nothing more."""
    pipe, write_config = _job(secure_sandbox, "swebhdfs", tmp_path, request)
    admin = pipe.fs
    assert isinstance(admin, WebHdfsFileSystem)
    token = admin.get_delegation_token(renewer="tester")
    assert admin.renew_delegation_token(token) > time.time()
    for _ in range(2):
        pipe.add_file(30)
    variable = SECRET_ENV["token"]
    config = write_config(kerberos_principal=None, keytab=None, token_env=variable)
    command = ("run", str(config), "--available-now", "--no-progress", "--log-level", "DEBUG")
    done = cli(*command, cwd=tmp_path, **{variable: token})
    assert done.returncode == 0, done.stderr[-3000:]
    assert pipe.published() == pipe.expected()
    assert token not in done.stderr and token not in done.stdout
    cuts = [s.name for s in admin.list_dir(posixpath.join(pipe.root, "checkpoints"))]
    for name in cuts:
        text = admin.read(posixpath.join(pipe.root, "checkpoints", name)) if "." in name else b""
        assert token.encode() not in text
    shown = cli("inspect", str(config), cwd=tmp_path, **{variable: token})
    assert shown.returncode == 0, shown.stderr
    assert token not in shown.stdout + shown.stderr

    admin.cancel_delegation_token(token)
    pipe.add_file(30)
    before = pipe.published()
    refused = cli(
        "run", str(config), "--available-now", "--no-progress", cwd=tmp_path, **{variable: token}
    )
    assert refused.returncode == 1, refused.stderr[-3000:]
    lines = [ln for ln in refused.stderr.strip().splitlines() if " INFO " not in ln]
    assert len(lines) == 1 and "refused the delegation token" in lines[0], refused.stderr
    assert token not in refused.stderr
    assert pipe.published() == before
    assert [s.name for s in admin.list_dir(posixpath.join(pipe.root, "checkpoints"))] == cuts


SPARK = """\
engine = "spark"
[filesystem]
uri = "{uri}"
{auth}
timeout = "20s"
retries = 2
retry_backoff = "200ms"
config_dir = "{conf_dir}"
[region]
period = "200ms"
# On the cluster: Spark keeps its part through its JVM's Hadoop client (hdfs://, found in
# config_dir), logged in with the same keytab.
checkpoint_dir = "{uri}{root}/checkpoints"
[scan]
directory = "{uri}{root}/landing"
[transform]
sql = "SELECT upper(value) AS value FROM input"
[sink]
file = "{uri}{root}/out/part-%FILENUM.txt"
tuples_per_file = 40
[spark]
max_files_per_trigger = 2
"""


@pytest.mark.spark
def test_spark_tasks_get_a_delegation_token_and_no_keytab(
    secure_sandbox: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The driver logs in with the keytab, gets a token and hands it to the tasks by the secret
    variable; the tasks' options carry neither the keytab nor the principal. The run is
    exactly-once and neither secret shows in its DEBUG log."""
    pipe, _ = _job(secure_sandbox, "swebhdfs", tmp_path, request)
    for _ in range(3):
        pipe.add_file(30)
    auth = _auth(secure_sandbox, "swebhdfs")
    config = tmp_path / "spark.toml"
    config.write_text(
        SPARK.format(
            uri=_uri(secure_sandbox, "swebhdfs"),
            auth="\n".join(f'{k} = "{v}"' for k, v in auth.items()),
            root=pipe.root,
            conf_dir=secure_sandbox.info.conf_dir,
        )
    )
    plan = plan_spark(load_pipeline(config))
    for options in (plan.source_options, plan.sink_options):
        assert options["token_env"] == SECRET_ENV["token"]
        assert not {"keytab", "keytab_env", "kerberos_principal"} & set(options)
    done = cli(
        "run",
        str(config),
        "--available-now",
        "--no-progress",
        "--log-level",
        "DEBUG",
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(pipe.published()) == sorted(pipe.expected())
    assert len(pipe.published()) == 90
    assert "delegation token for the tasks" in done.stderr
    # Spark's own checkpoint is on the cluster too: its JVM logged in with the keytab.
    commits = posixpath.join(pipe.root, "checkpoints", "spark", "commits")
    assert [s.name for s in pipe.fs.list_dir(commits) if not s.name.startswith(".")]
    keytab = secure_sandbox.info.keytab
    assert keytab is not None and keytab not in done.stderr
    assert "delegation=" not in done.stderr.replace("delegation=***", "")


REVOKE = """\
import os
from pathlib import Path

from operators.fs import FileSystemSettings, WebHdfsFileSystem

MARKER = Path(os.environ["REVOKE_MARKER"])


def shout(record):
    # Once, in the first task that runs: cancel the token this task was handed, as a token
    # reaching its end would be; the task's next call to the cluster is refused.
    if not MARKER.exists():
        MARKER.write_text("revoked")
        settings = FileSystemSettings.model_validate(
            {
                "uri": os.environ["REVOKE_URI"],
                "kerberos_principal": os.environ["REVOKE_PRINCIPAL"],
                "keytab": os.environ["REVOKE_KEYTAB"],
                "ca_bundle": os.environ["REVOKE_CA"],
            }
        )
        WebHdfsFileSystem(settings).cancel_delegation_token(os.environ["HDFS_REGION_SECRET_TOKEN"])
    return record.upper()
"""


@pytest.mark.spark
def test_a_token_refused_mid_batch_means_a_new_token_and_the_batch_again(
    secure_sandbox: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The tasks' token stops working in the middle of a batch (cancelled here, as one past its
    lifetime is refused): the batch fails with a line naming the refused token, the driver
    gets a new token through its login before it runs the batch again, and the output is every
    record exactly once."""
    pipe, _ = _job(secure_sandbox, "swebhdfs", tmp_path, request)
    for _ in range(3):
        pipe.add_file(30)
    (tmp_path / "revoke.py").write_text(REVOKE)
    auth = _auth(secure_sandbox, "swebhdfs")
    config = tmp_path / "spark.toml"
    text = SPARK.format(
        uri=_uri(secure_sandbox, "swebhdfs"),
        auth="\n".join(f'{k} = "{v}"' for k, v in auth.items()),
        root=pipe.root,
        conf_dir=secure_sandbox.info.conf_dir,
    )
    text = text.replace(
        'sql = "SELECT upper(value) AS value FROM input"', 'function = "revoke:shout"'
    )
    config.write_text(text.replace("[region]\n", '[region]\nreset_backoff = "100ms"\n'))
    info = secure_sandbox.info
    assert info.principal and info.keytab and info.ca_file
    done = cli(
        "run",
        str(config),
        "--available-now",
        "--no-progress",
        cwd=tmp_path,
        timeout=600,
        REVOKE_MARKER=str(tmp_path / "revoked"),
        REVOKE_URI=_uri(secure_sandbox, "swebhdfs"),
        REVOKE_PRINCIPAL=info.principal,
        REVOKE_KEYTAB=info.keytab,
        REVOKE_CA=info.ca_file,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "revoked").exists()
    assert "refused the delegation token" in done.stderr, done.stderr[-3000:]
    assert "a new delegation token for the tasks" in done.stderr
    assert sorted(pipe.published()) == sorted(pipe.expected())
    assert len(pipe.published()) == 90


def test_hdfs_without_the_clusters_configuration_logs_in_and_names_what_is_missing(
    secure_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keytab and no core-site.xml (no config_dir, no HADOOP_CONF_DIR): the client logs in
    with Kerberos all the same (it offered SIMPLE authentication, and the NameNode closed the
    connection: "RPC listener disconnected"), and where the DataNodes ask for SASL, which only
    the cluster's hdfs-site.xml says, the error names the setting and config_dir."""
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    fs, base = admin_fs(secure_sandbox, "hdfs")
    path = posixpath.join(base, f"no-conf-{time.monotonic_ns()}.txt")
    with fs.create(path) as out:
        out.write(b"one\n")
    info = secure_sandbox.info
    bare = FileSystemSettings.model_validate(
        {
            "uri": info.hdfs,
            "retries": 0,
            **_auth(secure_sandbox, "hdfs", config_dir=None),
            "webhdfs_uri": info.webhdfs,
        }
    )
    client, _ = open_path(info.hdfs + "/tests", bare)
    assert client.status(path).size == 4  # NameNode calls: the Kerberos login held
    with pytest.raises(OSError) as caught:
        client.read(path, 0, 4)
    message = str(caught.value)
    assert "dfs.data.transfer.protection" in message and "config_dir" in message, message
