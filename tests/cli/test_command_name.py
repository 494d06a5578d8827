"""The next command ``init`` prints runs as printed: ``hdfs-region`` when PATH finds the script
that ran, its path (relative to the current directory when under it) when it is not on PATH, as
after ``pip install -e .`` into a ``.venv`` that is not activated, and ``python -m
operators.app`` when run that way."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import cli_env

#: The script ``pip install`` writes: the installed command's own entry point.
SCRIPT = f"""\
#!{sys.executable}
import sys
from operators.app.cli import main
sys.exit(main())
"""


def install(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True)
    script = bin_dir / "hdfs-region"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    return script


def env_without(bin_dir: Path | None = None) -> dict[str, str]:
    """The test's environment; PATH leads with ``bin_dir`` when given, and never holds a
    ``hdfs-region`` of its own (one installed in the test's environment)."""
    env = cli_env()
    kept = [
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "hdfs-region").exists()
    ]
    env["PATH"] = os.pathsep.join(([str(bin_dir)] if bin_dir else []) + kept)
    return env


def next_command(stdout: str) -> str:
    return stdout.strip().splitlines()[-1].strip()


def runs_as_printed(line: str, cwd: Path, env: dict[str, str]) -> None:
    """The printed line, run by a shell in the same directory, reads what landed."""
    (cwd / "job" / "landing" / "a.txt").write_text("one\n")
    ran = subprocess.run(
        f"{line} --no-progress", shell=True, cwd=cwd, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, (line, ran.stderr)
    published = [p.read_text() for p in (cwd / "job" / "curated").glob("part-*")]
    assert published == ["one\n"]


def init(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    made = subprocess.run(
        [*command, "init", "job"], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    return next_command(made.stdout)


def test_a_script_not_on_path_is_printed_relative_to_the_current_directory(
    tmp_path: Path,
) -> None:
    script = install(tmp_path / ".venv" / "bin")
    env = env_without()
    line = init([str(script)], tmp_path, env)
    assert shlex.split(line) == [
        ".venv/bin/hdfs-region",
        "run",
        "job/pipeline.toml",
        "--available-now",
    ]
    runs_as_printed(line, tmp_path, env)


def test_a_script_elsewhere_is_printed_with_its_absolute_path(tmp_path: Path) -> None:
    script = install(tmp_path / "tools" / "bin")
    here = tmp_path / "work"
    here.mkdir()
    env = env_without()
    line = init([str(script)], here, env)
    assert shlex.split(line)[0] == str(script)
    runs_as_printed(line, here, env)


def test_a_script_on_path_is_printed_by_its_name(tmp_path: Path) -> None:
    script = install(tmp_path / ".venv" / "bin")
    env = env_without(script.parent)
    line = init([str(script)], tmp_path, env)
    assert shlex.split(line)[0] == "hdfs-region"
    runs_as_printed(line, tmp_path, env)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_python_m_operators_app_is_printed_with_the_interpreter_that_ran(tmp_path: Path) -> None:
    env = env_without()
    line = init([sys.executable, "-m", "operators.app"], tmp_path, env)
    words = shlex.split(line)
    assert words[1:3] == ["-m", "operators.app"]
    assert os.path.abspath(os.path.join(tmp_path, words[0])) == os.path.abspath(sys.executable) or (
        shutil.which(words[0], path=env["PATH"]) == os.path.abspath(sys.executable)
    )
    runs_as_printed(line, tmp_path, env)
