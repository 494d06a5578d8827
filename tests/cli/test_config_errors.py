"""Configuration errors: exit code 2 and one line per bad key naming the key and the value,
for both engines, before any JVM starts and before anything is written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from operators.app.cli import main
from tests.cli.conftest import PipelineDir, cli

GOOD = {
    "head": 'engine = "{engine}"',
    "region": "",
    "scan": 'directory = "landing"',
    "sink": 'file = "out/part-%FILENUM.txt"',
}


def settings(engine: str, **tables: str) -> str:
    parts = {**GOOD, **tables}
    text = parts.pop("head").format(engine=engine) + "\n"
    for table, body in parts.items():
        if body is not None:
            text += f"[{table}]\n{body}\n"
    return text


# (tables to change, what the message must say). Each message names table, key and value.
CASES = [
    pytest.param(
        {"sink": 'file = "out/p-%FILENUM"\ntuples_per_file = "abc"'},
        "[sink] tuples_per_file: Input should be a valid integer, unable to parse string as an "
        "integer (got 'abc')",
        id="sink-int",
    ),
    pytest.param(
        {"sink": 'file = "o/%FILENUM"\ntuplesPerFile = 0'},
        "[sink] tuplesPerFile: Input should be greater than or equal to 1 (got 0)",
        id="ibm-alias-kept",
    ),
    pytest.param(
        {"sink": 'file = "out/f-%TIME.txt"\ntime_per_file = "1s"'},
        "file='out/f-%TIME.txt' has no %FILENUM but time_per_file rolls to new files",
        id="time-names-without-filenum",
    ),
    pytest.param(
        {"sink": 'file = "out/p-%FILENUM.parquet"\nformat = "parquet"'},
        "format='parquet' needs [sink.schema], the type of each column",
        id="parquet-without-schema",
    ),
    pytest.param(
        {"source": 'format = "csv"'},
        "format='csv' needs [source.schema], the type of each column",
        id="csv-without-schema",
    ),
    pytest.param(
        {"source": 'format = "csv"\n[source.schema]\nid = "int65"'},
        "[source.schema] column 'id': unknown column type 'int65'",
        id="unknown-column-type",
    ),
    pytest.param(
        {"region": 'period = "5 parsecs"'},
        "[region] period: duration '5 parsecs' is not understood",
        id="duration",
    ),
    pytest.param(
        {"region": 'trigger = "sometimes"'},
        "[region] trigger: Input should be 'periodic' or 'operator_driven' (got 'sometimes')",
        id="trigger",
    ),
    pytest.param(
        {"scan": 'directory = "landing"\nsleep_tme = "1s"'},
        "[scan] sleep_tme: unknown key; did you mean 'sleep_time'? (known: directory, pattern, "
        "sleep_time,",
        id="unknown-key",
    ),
    pytest.param(
        # The keys listed are the file's names (``schema``), not the model's (``schema_``).
        {"sink": 'file = "out/part-%FILENUM.txt"\non_bad_row = "reject"'},
        "[sink] on_bad_row: unknown key; did you mean 'on_bad_record'? (known: file, directory, "
        "file_attribute_name",
        id="unknown-key-suggests",
    ),
    pytest.param(
        {"sink": 'file = "out/part-%FILENUM.txt"\non_bad_row = "reject"'},
        "close_on_punct, encoding, format, schema, compression, header,",
        id="unknown-key-lists-file-names",
    ),
    pytest.param({"scan": 'pattern = "x"'}, "[scan] directory: required", id="no-directory"),
    pytest.param(
        {"region": 'drain_timeout = "5m"', "metrics": 'stuck_after = "6m"'},
        "[metrics] stuck_after: 360 s must be longer than [region] drain_timeout + "
        "reset_timeout (480 s)",
        id="stuck-after-below-timeouts",
    ),
    pytest.param(
        {"scan": 'directory = "s3://bucket/landing"'},
        "[scan] directory: unknown filesystem scheme 's3' (known: file, hdfs, http, https, "
        "swebhdfs, webhdfs) (got 's3://bucket/landing')",
        id="scheme",
    ),
    pytest.param(
        {"sink": 'file = "webhdfs://nn:port/out/%FILENUM"'},
        "[sink] file: 'webhdfs://nn:port' has a bad host:port 'nn:port'",
        id="host-port",
    ),
    pytest.param(
        {"scan": 'directory = "landing"\npattern = "(["'},
        "[scan] pattern: pattern '([' is not a valid regular expression",
        id="pattern",
    ),
    pytest.param(
        {"source": 'encoding = "klingon"'},
        "[source] encoding: encoding 'klingon' is not known to Python's codecs",
        id="encoding",
    ),
    pytest.param(
        {"sink": 'file = "o/%FILENUM"\ntuples_per_file = 5\nbytes_per_file = 9'},
        "[sink] tuples_per_file=5 and bytes_per_file=9 exclude each other",
        id="exclusive",
    ),
    pytest.param({"sink": None}, "[sink]: the table is required", id="no-sink"),
    pytest.param(
        {"transform": 'function = "no_such_module:f"'},
        "[transform] function: cannot import module 'no_such_module'",
        id="function-import",
    ),
    pytest.param(
        {"transform": 'function = "not a function"'},
        "[transform] function: 'not a function' is not 'module:function'",
        id="function-syntax",
    ),
    pytest.param(
        {"sink": 'file = "landing/out-%FILENUM.txt"'},
        "[sink] file: 'landing/out-%FILENUM.txt' writes into the watched directory 'landing' and "
        "the scan would read its own output ('out-0.txt' is read)",
        id="output-inside-input",
    ),
    pytest.param(
        {"sink": 'file = "p-%FILENUM.txt"\nrejects_file = "landing/r-%FILENUM.jsonl"'},
        "[sink] rejects_file: 'landing/r-%FILENUM.jsonl' writes into the watched directory",
        id="rejects-inside-input",
    ),
    pytest.param(
        {"sink": 'directory = "."\nfile_attribute_name = "name"'},
        "[sink] directory: '.' holds the watched directory 'landing', and records may name files",
        id="attribute-base-holds-input",
    ),
    pytest.param(
        {"region": 'checkpoint_dir = "landing"'},
        "[region] checkpoint_dir: 'landing' is the watched directory, and the scan would read "
        "the checkpoint files as input",
        id="checkpoints-in-the-watched-directory",
    ),
    pytest.param(
        {"region": 'checkpoint_dir = "out/"'},
        "[region] checkpoint_dir: 'out/' is the output directory, where readers would see the "
        "checkpoint files",
        id="checkpoints-in-the-output-directory",
    ),
    pytest.param(
        {"spark": 'remote = "http://spark:15002"'},
        "[spark] remote: 'http://spark:15002' is not a Spark Connect URL (sc://host:port)",
        id="remote-not-sc",
    ),
    pytest.param(
        {"spark": 'remote = "sc://spark:15002"\nmaster = "local[2]"'},
        "master and remote are both given: a Spark Connect server has its own master",
        id="remote-and-master",
    ),
]


def run_main(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["run", str(config), "--available-now", *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize(("tables", "expected"), CASES)
def test_bad_values_exit_2_naming_key_and_value(
    pdir: PipelineDir,
    capsys: pytest.CaptureFixture[str],
    engine: str,
    tables: dict[str, str | None],
    expected: str,
) -> None:
    pdir.add_files(1, 3)
    config = pdir.write_config(settings(engine, **tables))
    code, err = run_main(config, capsys)
    assert code == 2
    assert expected in err
    assert err.startswith("hdfs-region: configuration error")
    assert not pdir.out.exists() and not (pdir.root / "checkpoints").exists()


@pytest.mark.parametrize(
    ("engine", "tables", "expected"),
    [
        (
            "local",
            {"transform": 'sql = "SELECT value FROM input"'},
            "[transform] sql: SQL transforms need the spark engine",
        ),
        (
            "spark",
            {
                "sink": 'file = "o/%FILENUM"\nclose_on_punct = true',
                "transform": 'sql = "SELECT value FROM input"',
            },
            "[sink] close_on_punct: needs the end of each input file",
        ),
        (
            "spark",
            {"sink": 'file = "o/%FILENUM"\npublish = "visible"'},
            "[sink] publish: the spark engine publishes by rename only (got 'visible')",
        ),
        (
            "spark",
            {"source": 'format = "jsonl"'},
            "[source] format = 'jsonl': the spark engine needs [source.schema]",
        ),
        (
            "spark",
            {"source": 'format = "csv"\n[source.schema]\nid = "int64"'},
            "[source] format = 'csv' reads records with columns, and the sink writes one value "
            "per record (a line or a block): give a [transform]",
        ),
        (
            "spark",
            {"sink": 'file = "o/%FILENUM"\nformat = "jsonl"'},
            "[sink] format = 'jsonl': the spark engine writes the columns of the rows read "
            "([source] format = 'csv' or 'jsonl', with or without a [transform] function) or "
            "of a [transform] sql",
        ),
        (
            "spark",
            {
                "source": 'format = "csv"\n[source.schema]\nid = "int64"',
                "transform": 'function = "pace:pace"',
                "sink": 'file = "o/%FILENUM"\nformat = "jsonl"',
            },
            "[sink] format = 'jsonl' after [transform] function: the spark engine needs the "
            "columns the function returns as [sink.schema]",
        ),
        (
            "local",
            {"transform": 'function = "pace:pace"\nvectorized = true'},
            "[transform] vectorized = true: the function takes the records' columns, which "
            "records have with [source] format = 'csv' or 'jsonl' and a [source.schema]",
        ),
        (
            "spark",
            {"transform": 'function = "pace:pace"\nvectorized = true'},
            "[transform] vectorized = true: the function takes the records' columns, which "
            "records have with [source] format = 'csv' or 'jsonl' and a [source.schema]",
        ),
    ],
)
def test_settings_one_engine_cannot_run(
    pdir: PipelineDir,
    capsys: pytest.CaptureFixture[str],
    engine: str,
    tables: dict[str, str],
    expected: str,
) -> None:
    config = pdir.write_config(settings(engine, **tables))
    code, err = run_main(config, capsys)
    assert code == 2
    assert expected in err


def test_the_command_line_engine_overrides_the_file(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    config = pdir.write_config(settings("spark", transform='sql = "SELECT value FROM input"'))
    code, err = run_main(config, capsys, "--engine", "local")
    assert code == 2 and "need the spark engine" in err


def test_a_bad_engine_and_a_bad_top_level_key(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    config = pdir.write_config('engine = "flink"\nmode = 3\n' + settings("local").split("\n", 1)[1])
    code, err = run_main(config, capsys)
    assert code == 2
    assert "engine: Input should be 'spark' or 'local' (got 'flink')" in err
    assert "mode: unknown key" in err


def test_toml_syntax_and_missing_file(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    pdir.root.mkdir(parents=True, exist_ok=True)
    bad = pdir.root / "bad.toml"
    bad.write_text("[scan]\ndirectory = landing\n")
    code, err = run_main(bad, capsys)
    assert code == 2 and "bad.toml is not valid TOML" in err and "line 2" in err
    code, err = run_main(pdir.root / "missing.toml", capsys)
    assert code == 2 and "cannot read settings file" in err and "missing.toml" in err


def test_credentials_are_never_echoed(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "hunter2-Sup3rS3cret"
    uri = f'uri = "webhdfs://alice:{secret}@nn:9870"'
    for body, key in [
        (f"{uri}\ntoken = 7", "[filesystem] token"),
        (f'{uri}\nuser = "bob"', "[filesystem] user"),
        ("password = 5", "[filesystem] password"),
        (f'keytab = "/etc/{secret}.keytab"', "[filesystem] keytab: '***' is set"),
    ]:
        config = pdir.write_config(settings("local", filesystem=body))
        code, err = run_main(config, capsys)
        assert code == 2
        assert key in err
        assert secret not in err


def test_missing_java_is_one_line_suggesting_the_local_engine(pdir: PipelineDir) -> None:
    pdir.add_files(1, 3)
    config = pdir.write_config(settings("spark"))
    done = cli(
        "run", str(config), "--available-now", PATH=os.path.dirname(sys.executable), JAVA_HOME=""
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "java was not found" in lines[0] and "--engine local" in lines[0]


def test_output_in_the_watched_directory_is_allowed_when_the_pattern_excludes_it(
    pdir: PipelineDir,
) -> None:
    from operators.app.config import load_pipeline

    body = settings(
        "local",
        scan='directory = "landing"\npattern = ".*\\\\.csv"',
        sink='file = "landing/out-%FILENUM.txt"',
    )
    config = load_pipeline(str(pdir.write_config(body)))
    assert config.sink.template is not None and config.sink.template.endswith("out-%FILENUM.txt")


def test_a_key_given_twice_under_its_two_names_is_named_as_such(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    body = settings("local", scan='directory = "landing"\nsleep_time = "1s"\nsleepTime = "2s"')
    code, err = run_main(pdir.write_config(body), capsys)
    assert code == 2
    assert "[scan] sleepTime: the same setting as sleep_time, given twice: keep one" in err


def test_a_bad_key_is_named_with_its_line_and_a_near_miss_with_the_key_meant(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    config = pdir.write_config(
        'engine = "local"\n'
        "naem = 'x'\n"
        "\n"
        "[scan]\n"
        'directory = "landing"\n'
        'sleep_tme = "1s"  # misspelt\n'
        "\n"
        "[sink]\n"
        'file = "out/part-%FILENUM.txt"\n'
        "tuplesPerFle = 3\n"
        'tuples_per_file = "abc"\n'
    )
    code, err = run_main(config, capsys)
    assert code == 2
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert any(line.startswith("line 2: naem: unknown key; did you mean 'name'?") for line in lines)
    assert any(
        line.startswith("line 6: [scan] sleep_tme: unknown key; did you mean 'sleep_time'?")
        for line in lines
    )
    # An IBM spelling is suggested as such.
    assert any(
        line.startswith("line 10: [sink] tuplesPerFle: unknown key; did you mean 'tuplesPerFile'?")
        for line in lines
    )
    assert "line 11: [sink] tuples_per_file: Input should be a valid integer" in err


def test_a_key_far_from_any_gets_no_guess(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    config = pdir.write_config(settings("local", scan='directory = "landing"\nzzz = 1'))
    code, err = run_main(config, capsys)
    assert code == 2
    assert "line 6: [scan] zzz: unknown key (known:" in err
