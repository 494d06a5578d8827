"""Credentials planted in the settings (a password in a webhdfs URI, a delegation token, a keytab
path) never appear in a log line (DEBUG, urllib3 included), an exception, the progress output,
``inspect``, or any file a run produced: the real ``hdfs-region`` command with the local engine
against the WebHDFS stand-in running as its own process."""

from __future__ import annotations

import json
import logging
import socket
import textwrap
from pathlib import Path

import pytest

from operators.app.config import load_pipeline
from operators.app.spark_plan import SECRET_ENV, plan_spark
from operators.fs import FileSystemSettings, open_filesystem, open_path
from operators.fs.errors import SecretScrubFilter, install_log_scrubbing
from operators.spark.options import scan_config, sink_config
from operators.testing.webhdfs_server import STATE_DIR, ServerProcess
from region.errors import ConfigError
from tests.cli.conftest import cli

PASSWORD = "pw-Mq3Zt8-planted"
TOKEN = "tok-Hx5Wr2-planted"
KEYTAB = "/etc/security/kt-Jv9Pn4-planted.keytab"
MARKERS = (PASSWORD, TOKEN, KEYTAB, "Mq3Zt8", "Hx5Wr2", "Jv9Pn4")

TRANSFORM = """\
def shape(record):
    return 42 if record == "bad" else record
"""


def assert_clean(text: str, where: str) -> None:
    for marker in MARKERS:
        assert marker not in text, f"{marker!r} leaked into {where}"


@pytest.fixture(scope="module")
def server(webhdfs_process: ServerProcess) -> ServerProcess:
    return webhdfs_process


def put_landing(server: ServerProcess, directory: str, files: int = 2, prefix: str = "f") -> None:
    fs = open_filesystem(FileSystemSettings(uri=server.uri, user="etl"))
    for i in range(files):
        writer = fs.create(f"{directory}/{prefix}{i}.txt")
        writer.write(b"".join(b"r%d-%d\n" % (i, j) for j in range(5)) + b"bad\n")
        writer.close()


def pipeline(folder: Path, name: str, server_uri: str, root: str, filesystem: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shape.py").write_text(TRANSFORM)
    path = folder / f"{name}.toml"
    path.write_text(
        textwrap.dedent(f"""\
        engine = "local"
        [region]
        period = "50ms"
        max_consecutive_reset_attempts = 1
        [scan]
        directory = "{root}/landing"
        [transform]
        function = "shape:shape"
        [sink]
        file = "{root}/out/part-%FILENUM.txt"
        rejects_file = "_rejects/rejects-%FILENUM.jsonl"
        [filesystem]
        """)
        + textwrap.dedent(filesystem)
    )
    return path


def files_text(*roots: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in root.rglob("*"):
            # The settings files hold the secrets: that is the point of them.
            skipped = path.suffix == ".toml" or any(part in skip for part in path.parts)
            if path.is_file() and not skipped:
                out[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return out


def test_no_credential_in_logs_errors_progress_inspect_or_files(
    server: ServerProcess, tmp_path: Path
) -> None:
    put_landing(server, "/s1/landing")
    host = server.uri.removeprefix("webhdfs://")
    config = pipeline(
        tmp_path / "pipe",
        "p",
        server.uri,
        "/s1",
        f"""\
        uri = "webhdfs://etl:{PASSWORD}@{host}"
        token = "{TOKEN}"
        """,
    )
    outputs: dict[str, str] = {}
    # 1. A run at DEBUG with progress lines (records: 10 good, 2 rejected by the sink).
    run = cli("run", str(config), "--available-now", "--log-level", "DEBUG")
    assert run.returncode == 0, run.stderr
    outputs |= {"run stdout": run.stdout, "run stderr": run.stderr}
    assert "urllib3.connectionpool" in run.stderr  # request lines at DEBUG
    assert "operators.app.progress" in run.stderr and "rejected record" in run.stderr
    # 2. A second run recovers from the checkpoint (reset path) with a new file.
    put_landing(server, "/s1/landing", files=1, prefix="g")
    run2 = cli("run", str(config), "--available-now", "--log-level", "DEBUG")
    assert run2.returncode == 0, run2.stderr
    outputs |= {"run2 stderr": run2.stderr, "run2 stdout": run2.stdout}
    # 3. inspect, through the settings file and through the directory.
    checkpoints = tmp_path / "pipe" / "checkpoints" / "p"
    for target in (str(config), str(checkpoints)):
        shown = cli("inspect", target)
        assert shown.returncode == 0, shown.stderr
        assert '"rejects"' in shown.stdout
        outputs |= {f"inspect {target}": shown.stdout + shown.stderr}
    # 4. An error: the same credentials against a port nobody listens on.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    dead = pipeline(
        tmp_path / "pipe",
        "dead",
        server.uri,
        "/s1",
        f"""\
        uri = "webhdfs://etl:{PASSWORD}@127.0.0.1:{dead_port}"
        token = "{TOKEN}"
        retries = 1
        retry_backoff = "10ms"
        """,
    )
    failed = cli("run", str(dead), "--available-now", "--log-level", "DEBUG")
    assert failed.returncode == 1
    assert "hdfs-region: error:" in failed.stderr and "ConnectionError" in failed.stderr
    outputs |= {"failed run": failed.stdout + failed.stderr}
    # 5. A keytab (Kerberos) of no KDC: the login fails saying so (or, without requests-gssapi,
    # what to install). The Kerberized runs: tests/security/test_kerberos.py.
    kerberos = pipeline(
        tmp_path / "pipe",
        "krb",
        server.uri,
        "/s1",
        f"""\
        uri = "webhdfs://{host}"
        kerberos_principal = "etl@EXAMPLE.COM"
        keytab = "{KEYTAB}"
        """,
    )
    krb = cli("run", str(kerberos), "--available-now", "--log-level", "DEBUG")
    outputs |= {"kerberos run": krb.stdout + krb.stderr}
    if krb.returncode != 0:
        assert "Traceback" not in krb.stderr
        assert "requests-gssapi" in krb.stderr or "keytab cannot be read" in krb.stderr
    no_principal = pipeline(
        tmp_path / "pipe", "badkrb", server.uri, "/s1", f'keytab = "{KEYTAB}"\n'
    )
    refused = cli("run", str(no_principal))
    assert refused.returncode == 2 and "kerberos_principal" in refused.stderr
    outputs |= {"config error": refused.stdout + refused.stderr}

    # The output arrived, rejects included: the run did something worth searching.
    fs = open_filesystem(FileSystemSettings(uri=server.uri, user="etl"))
    data = fs.read("/s1/out/part-0.txt").decode().splitlines()
    assert len(data) == 10 and data[0] == "r0-0"
    rejects = [s for s in fs.list_dir("/s1/out/_rejects") if not s.name.startswith(".")]
    lines = [json.loads(x) for s in rejects for x in fs.read(s.path).decode().splitlines()]
    assert sorted(r["record"] for r in lines) == [42, 42, 42]
    for where, text in outputs.items():
        assert_clean(text, where)
    # Every file the runs produced: checkpoints, the identity, lock files, output, rejects.
    produced = files_text(tmp_path, server.root, skip=(STATE_DIR,))
    assert any("cut-" in p for p in produced) and any("rejects-" in p for p in produced)
    assert any(".lock-" in p for p in produced)
    for path, text in produced.items():
        assert_clean(text, path)
    assert "delegation=***" in run.stderr  # the token was there, and masked


def test_urllib3_debug_records_and_errors_are_scrubbed(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    host = server.uri.removeprefix("webhdfs://")
    settings = FileSystemSettings(uri=f"webhdfs://etl:{PASSWORD}@{host}", token=TOKEN)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")
    fs = open_filesystem(settings)  # installs the filter
    writer = fs.create("/s2/a.txt", permission=0o600)  # a 307 redirect carries the token too
    writer.write(b"x\n")
    writer.close()
    fs.rename("/s2/a.txt", "/s2/b.txt")
    assert fs.read("/s2/b.txt") == b"x\n"
    errors = []
    for action in (lambda: fs.read("/s2/missing"), lambda: fs.rename("/s2/nope", "/s2/x")):
        with pytest.raises(FileNotFoundError) as info:
            action()
        errors.append(str(info.value))
    urllib3_lines = [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]
    for text in [caplog.text, *urllib3_lines, *errors, repr(settings), str(settings)]:
        assert_clean(text, "logs and errors")
    assert_clean(settings.model_dump_json(), "settings dump")
    assert any("delegation=***" in line and "op=CREATE" in line for line in urllib3_lines)
    assert any("namenoderpcaddress" in line for line in urllib3_lines)  # the redirected URL


def test_the_filter_scrubs_exception_text_and_registered_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_log_scrubbing()
    child = logging.getLogger("urllib3.util.retry")
    assert any(isinstance(f, SecretScrubFilter) for f in child.filters)
    caplog.set_level(logging.DEBUG, logger="urllib3")
    try:
        raise ConnectionError(f"GET http://nn:9870/webhdfs/v1/x?op=OPEN&delegation={TOKEN}")
    except ConnectionError:
        child.debug("Retry for url=%s", f"http://u:{PASSWORD}@nn/x?token={TOKEN}", exc_info=True)
    (record,) = [r for r in caplog.records if r.name == "urllib3.util.retry"]
    # A plain formatter: another library (pyspark's JSON logger) may have replaced the
    # capture handler's formatter by the time this runs.
    text = logging.Formatter("%(message)s").format(record)
    assert "delegation=***" in text and "token=***" in text
    assert_clean(text, "formatted record")
    assert_clean(caplog.text, "captured text")
    assert_clean(record.exc_text or "", "exception text")


def test_a_formatter_that_renders_the_exception_itself_sees_it_masked() -> None:
    """pyspark's JSON formatter (on the handlers once a SparkSession ran in the process) reads
    the exception from ``exc_info``, not the scrubbed ``exc_text``."""
    from pyspark.logger.logger import JSONFormatter

    child = logging.getLogger("urllib3.util.retry")
    install_log_scrubbing()
    assert any(isinstance(f, SecretScrubFilter) for f in child.filters)
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Capture()
    handler.setFormatter(JSONFormatter())
    child.addHandler(handler)
    child.setLevel(logging.DEBUG)
    original: BaseException | None = None
    try:
        try:
            raise OSError(f"connect to http://nn/x?delegation={TOKEN} failed")
        except OSError as inner:
            try:
                raise ConnectionError(f"GET http://u:{PASSWORD}@nn/x?op=OPEN") from inner
            except ConnectionError as outer:
                original = outer
                child.debug("Retry", exc_info=True)
    finally:
        child.removeHandler(handler)
        child.setLevel(logging.NOTSET)
    (text,) = seen
    assert_clean(text, "JSON-formatted record")
    assert "GET http://nn/x?op=OPEN" in text  # the rest of the message stays readable
    # The program's own exception is untouched.
    assert original is not None and TOKEN in str(original.__cause__)


def test_spark_options_carry_references_never_the_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_path = tmp_path / "spark.toml"
    config_path.write_text(
        textwrap.dedent(f"""\
        engine = "spark"
        [scan]
        directory = "/landing"
        [sink]
        file = "/out/part-%FILENUM.txt"
        [filesystem]
        uri = "webhdfs://etl:{PASSWORD}@nn:9870"
        token = "{TOKEN}"
        kerberos_principal = "etl@EXAMPLE.COM"
        keytab = "{KEYTAB}"
        [region]
        checkpoint_dir = "file://{tmp_path}/cp"
        """)
    )
    config = load_pipeline(config_path)
    assert_clean(repr(config) + config.model_dump_json(), "the pipeline settings")
    plan = plan_spark(config)
    for options in (plan.source_options, plan.sink_options):
        assert_clean(json.dumps(options), "Spark options")
        assert options["token_env"] == SECRET_ENV["token"]
        assert options["keytab_env"] == SECRET_ENV["keytab"]
    assert plan.secret_env == {
        SECRET_ENV["password"]: PASSWORD,
        SECRET_ENV["token"]: TOKEN,
        SECRET_ENV["keytab"]: KEYTAB,
    }
    # What the data sources do with them (in Spark's processes, which inherit the variables).
    for name, value in plan.secret_env.items():
        monkeypatch.setenv(name, value)
    scan = scan_config(plan.source_options)
    sink = sink_config(plan.sink_options)
    for fs in (scan.fs, sink.fs):
        assert fs is not None and fs.token is not None and fs.password is not None
        assert fs.token.get_secret_value() == TOKEN
        assert fs.password.get_secret_value() == PASSWORD
        assert_clean(repr(fs), "the data source's settings")
    monkeypatch.delenv(SECRET_ENV["token"])
    with pytest.raises(Exception, match=r"HDFS_REGION_SECRET_TOKEN.* is not set") as info:
        scan_config(plan.source_options)
    assert_clean(str(info.value), "a missing variable's error")


def test_credentials_stay_with_their_filesystem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETL_TOKEN", TOKEN)
    base = FileSystemSettings(
        uri=f"webhdfs://etl:{PASSWORD}@nn:9870", token_env="ETL_TOKEN", timeout="5s"
    )
    same, _ = open_path("webhdfs://nn:9870/landing", base)
    other, path = open_path("webhdfs://elsewhere:9870/landing", base)
    assert same.settings.token is not None and same.settings.password is not None  # type: ignore[attr-defined]
    settings = other.settings  # type: ignore[attr-defined]
    assert (settings.token, settings.password, settings.token_env) == (None, None, None)
    assert (settings.user, settings.timeout, path) == ("etl", 5.0, "/landing")


def test_a_password_in_a_path_uri_never_becomes_a_spark_option(tmp_path: Path) -> None:
    config_path = tmp_path / "spark.toml"
    config_path.write_text(
        textwrap.dedent(f"""\
        engine = "spark"
        [scan]
        directory = "webhdfs://etl:{PASSWORD}@nn:9870/landing"
        [sink]
        file = "/tmp/out/part-%FILENUM.txt"
        """)
    )
    with pytest.raises(ConfigError, match=r"\[scan\] directory: 'webhdfs://nn:9870/landing'") as e:
        plan_spark(load_pipeline(config_path))
    assert_clean(str(e.value), "the error")
