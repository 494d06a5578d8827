"""A reader that closes standard output early (``hdfs-region inspect job.toml | head -1``)
ends the command quietly with 141 (128 + SIGPIPE): no traceback, and never reported as a
failure of the command's own work (a checkpoint read, an I/O error)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from operators.app.cli import main
from tests.cli.conftest import PipelineDir, cli, cli_env

SETTINGS = """\
    engine = "local"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
"""


def closed_reader(*args: str, buffered: bool = True) -> tuple[int, str]:
    """``hdfs-region ARGS`` whose standard output is a pipe closed before it writes;
    ``buffered``: as Python writes to a pipe by default (block-buffered, flushed at exit), else
    with ``PYTHONUNBUFFERED`` set."""
    env = cli_env()
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "operators.app", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return proc.returncode, err


@pytest.fixture
def config(pdir: PipelineDir) -> Path:
    pdir.add_files(2, 10)
    path = pdir.write_config(SETTINGS)
    assert cli("run", str(path), "--available-now").returncode == 0
    return path


@pytest.mark.parametrize(
    "args",
    [("--help",), ("inspect", "{config}"), ("run", "{config}", "--available-now")],
    ids=["help", "inspect", "run"],
)
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_closed_pipe_ends_the_command_quietly(
    config: Path, args: tuple[str, ...], buffered: bool
) -> None:
    code, err = closed_reader(*(a.format(config=config) for a in args), buffered=buffered)
    assert code == 141
    assert "Traceback" not in err and "Broken pipe" not in err and "error" not in err


class _ClosesAfter(io.StringIO):
    """Standard output whose reader goes away after ``lines`` writes."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.left = lines

    def write(self, text: str) -> int:
        if self.left == 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= 1
        return super().write(text)


def test_a_closed_pipe_is_not_a_checkpoint_read_error(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The pipe closes while the cuts are listed, inside the checkpoint reads' error handling.
    monkeypatch.setattr(sys, "stdout", _ClosesAfter(6))
    assert main(["inspect", str(config)]) == 141
    err = capsys.readouterr().err
    assert "cannot read checkpoint directory" not in err and "error" not in err
