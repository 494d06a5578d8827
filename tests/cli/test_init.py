"""``hdfs-region init``: the newcomer's first own pipeline is written, loads, and runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.cli.conftest import cli
from tests.conftest import CLUSTER_USER, real_fs


def test_init_writes_a_pipeline_that_runs_and_names_the_next_command(tmp_path: Path) -> None:
    made = cli("init", "job", "--landing", "landing", "--output", "curated", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = tmp_path / "job" / "pipeline.toml"
    # Run as `python -m operators.app`: the next command is given the same way.
    assert f"-m operators.app run {Path('job') / 'pipeline.toml'} --available-now" in made.stdout
    assert (tmp_path / "job" / "landing").is_dir()  # ready for the first file
    (tmp_path / "job" / "landing" / "a.txt").write_text("one\ntwo\n")
    ran = cli("run", str(config), "--available-now", "--no-progress", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    published = [p for p in (tmp_path / "job" / "curated").iterdir() if p.is_file()]
    assert "".join(p.read_text() for p in published) == "one\ntwo\n"


def test_init_never_replaces_a_pipeline_without_force(tmp_path: Path) -> None:
    assert cli("init", str(tmp_path)).returncode == 0
    config = tmp_path / "pipeline.toml"
    config.write_text(config.read_text() + "# my edits\n")
    again = cli("init", str(tmp_path))
    assert again.returncode == 2 and "--force" in again.stderr
    assert config.read_text().endswith("# my edits\n")
    assert cli("init", str(tmp_path), "--force").returncode == 0
    assert not config.read_text().endswith("# my edits\n")


def test_init_refuses_an_output_the_scan_would_read_back_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    bad = cli("init", str(tmp_path), "--landing", "data", "--output", "data")
    assert bad.returncode == 2, bad.stderr
    assert "writes into the watched directory" in bad.stderr
    assert not (tmp_path / "pipeline.toml").exists()


def test_init_quotes_a_folder_with_a_space_and_paths_with_quotes_and_backslashes(
    tmp_path: Path,
) -> None:
    """The "run this" line is one shell word per argument for a folder with a space, and a
    landing path with a quote and a backslash is written as valid TOML (it was written raw,
    then blamed on line 21 of a pipeline.toml already deleted)."""
    made = cli("init", "my job", "--landing", 'a"b\\c', "--output", "cur ated", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    line = made.stdout.strip().splitlines()[-1]
    words = shlex.split(line)
    assert words[1:] == ["-m", "operators.app", "run", "my job/pipeline.toml", "--available-now"]
    landing = tmp_path / "my job" / 'a"b\\c'
    assert landing.is_dir()
    (landing / "x.txt").write_text("one\n")
    ran = cli("run", "my job/pipeline.toml", "--available-now", "--no-progress", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert [p.read_text() for p in (tmp_path / "my job" / "cur ated").glob("part-*")] == ["one\n"]


def test_a_refused_init_keeps_the_pipeline_it_would_replace_and_names_the_options(
    tmp_path: Path,
) -> None:
    assert cli("init", str(tmp_path)).returncode == 0
    before = (tmp_path / "pipeline.toml").read_text()
    bad = cli("init", str(tmp_path), "--landing", "d", "--output", "d", "--force")
    assert bad.returncode == 2
    assert "--landing 'd' --output 'd' make no valid pipeline" in bad.stderr
    assert (tmp_path / "pipeline.toml").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curated", "landing", "pipeline.toml"]


@pytest.mark.slow
def test_init_for_hdfs_runs_on_the_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("names the session's sandbox by its hdfs:// address")
    root = f"{base}/init-{tmp_path.name}"
    uri = f"{sandbox.info.hdfs}{root}"
    fs.mkdirs(f"{root}/landing")
    writer = fs.create(f"{root}/landing/a.txt")
    writer.write(b"alpha\nbeta\n")
    writer.close()
    made = cli("init", str(tmp_path), "--landing", f"{uri}/landing", "--output", f"{uri}/out")
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "pipeline.toml").read_text()
    assert "[filesystem]" in text and f"{uri}/landing" in text
    ran = cli(
        "run",
        str(tmp_path / "pipeline.toml"),
        "--available-now",
        "--no-progress",
        HADOOP_USER_NAME=CLUSTER_USER,
    )
    assert ran.returncode == 0, ran.stderr
    names = [e.path for e in fs.list_dir(f"{root}/out") if e.path.rsplit("/", 1)[1][0] not in "._"]
    assert b"".join(fs.read(n) for n in names) == b"alpha\nbeta\n"
