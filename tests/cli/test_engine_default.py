"""Which engine runs, on purpose: a settings file without ``engine`` keeps running on Spark (its
checkpoints belong to the engine that wrote them) and says so at start; ``init`` writes
``engine = "local"`` with the reason; both ``--help`` texts state the rule."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from operators.app.cli import main
from operators.app.config import load_pipeline

BODY = """\
[scan]
directory = "landing"
[sink]
file = "out/part-%FILENUM.txt"
"""


def write(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "job.toml"
    config.write_text(text)
    return config


def default_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and "the default" in r.getMessage()
    ]


def test_a_file_without_engine_runs_on_spark_and_says_it_is_the_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = write(tmp_path, BODY)
    with caplog.at_level(logging.INFO):
        loaded = load_pipeline(config)
    assert loaded.engine == "spark"
    assert default_lines(caplog) == [
        f'engine: spark, the default ({config} has no engine key; set engine = "local" or '
        '"spark" there, or give --engine)'
    ]


@pytest.mark.parametrize(
    ("text", "override"), [('engine = "spark"\n' + BODY, None), (BODY, "local")]
)
def test_an_engine_named_in_the_file_or_on_the_command_line_logs_no_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, override: str | None
) -> None:
    config = write(tmp_path, text)
    with caplog.at_level(logging.INFO):
        load_pipeline(config, engine=override)  # type: ignore[arg-type]
    assert default_lines(caplog) == []


def test_init_writes_the_local_engine_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    text = (tmp_path / "pipeline.toml").read_text()
    assert tomllib.loads(text)["engine"] == "local"
    comment = text.split('\nengine = "local"')[0].rsplit("\n\n", 1)[1]
    assert "no JVM" in comment and "the same" in comment and "guarantees" in comment
    assert 'without\n# it a run uses "spark"' in comment


@pytest.mark.parametrize("command", ["run", "init"])
def test_help_states_the_default_of_a_file_without_engine(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "without one runs on spark" in text or "without the key runs on spark" in text
