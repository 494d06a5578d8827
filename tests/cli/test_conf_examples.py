"""The example pipelines in conf/ load, and run as written (paths moved to a scratch folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from operators.app.config import load_pipeline
from operators.app.spark_plan import plan_spark
from tests.cli.conftest import ROOT, PipelineDir, cli

CONF = ROOT / "conf"
EXAMPLES = ["periodic.toml", "operator_driven.toml", "webhdfs.toml", "hdfs.toml"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_load_for_both_engines(name: str) -> None:
    for engine in ("spark", "local"):
        config = load_pipeline(CONF / name, engine=engine)  # type: ignore[arg-type]
        assert config.engine == engine
        assert config.pipeline_id() == config.name
    assert plan_spark(load_pipeline(CONF / "periodic.toml")).source_options["pattern"]


def copy_example(name: str, pdir: PipelineDir, **replace: str) -> Path:
    """The example in ``pdir/conf/``, so that its ../data paths land in ``pdir/data``."""
    (pdir.root / "conf").mkdir(parents=True, exist_ok=True)
    text = (CONF / name).read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    target = pdir.root / "conf" / name
    target.write_text(text)
    return target


def landing_files(landing: Path, count: int, suffix: str) -> list[str]:
    landing.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(count):
        rows = [f"row-{i}-{j}" for j in range(25)]
        path = landing / f"in-{i}{suffix}"
        path.write_text("\n".join(rows) + "\n")
        mtime = 1_600_000_000_000_000_000 + i * 1_000_000_000  # old enough for min_file_age
        os.utime(path, ns=(mtime, mtime))
        records += rows
    return records


def published(directory: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith((".", "_")):
            lines += path.read_text().splitlines()
    return lines


def test_operator_driven_example_runs(pdir: PipelineDir) -> None:
    config = copy_example("operator_driven.toml", pdir)
    records = landing_files(pdir.root / "data" / "landing", 3, ".csv")
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert sorted(published(pdir.root / "data" / "curated")) == sorted(records)
    # A cut after each file (three) and the final one.
    assert done.stderr.count("(trigger: operator_driven)") == 3


def test_periodic_example_runs_locally_with_a_function(pdir: PipelineDir) -> None:
    config = copy_example(
        "periodic.toml",
        pdir,
        **{'sql = "SELECT upper(value) AS value FROM input"': 'function = "pace:shout"'},
    )
    pdir.write_config("", "unused.toml")  # puts pace.py next to the settings files
    shutil.copy(pdir.root / "pace.py", pdir.root / "conf" / "pace.py")
    records = landing_files(pdir.root / "data" / "landing", 2, ".txt")
    done = cli("run", str(config), "--available-now", "--engine", "local")
    assert done.returncode == 0, done.stderr
    assert published(pdir.root / "data" / "out") == [r.upper() for r in records]


def test_webhdfs_example_runs_against_a_webhdfs_server(
    pdir: PipelineDir, webhdfs_server: Any, request: pytest.FixtureRequest
) -> None:
    base = f"/cli-{request.node.name}"
    token = "tok-3Qx9-do-not-print"
    config = copy_example(
        "webhdfs.toml",
        pdir,
        **{
            '"webhdfs://namenode.example.com:9870"': f'"{webhdfs_server.uri}"\ntoken = "{token}"',
            '"/landing/orders"': f'"{base}/landing"',
            '"/curated/orders/': f'"{base}/curated/',
            'period = "5s"': 'period = "200ms"',
        },
    )
    server_root = Path(webhdfs_server.root)
    records = landing_files(server_root / base.lstrip("/") / "landing", 3, ".json")
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert sorted(published(server_root / base.lstrip("/") / "curated")) == sorted(records)
    assert token not in done.stdout + done.stderr
    for path in (pdir.root / "conf" / "checkpoints").rglob("*"):
        if path.is_file():
            assert token not in path.read_text()
