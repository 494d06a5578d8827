"""``hdfs-region demo``: the newcomer's first command proves exactly-once delivery."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.app.cli import main


def test_local_demo_kills_restarts_and_reports_exactly_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "demo"
    code = main(["demo", str(work), "--engine", "local", "--files", "4", "--lines", "200"])
    report = capsys.readouterr().out
    assert code == 0, report
    assert "killed it with SIGKILL mid-run" in report
    for line in ("records in         800", "records out        800", "duplicates           0"):
        assert line in report
    assert "missing              0" in report and "exactly once: YES" in report
    # The same directory again: a demo directory is reused, anything else is refused.
    assert main(["demo", str(work), "--engine", "local", "--files", "2", "--lines", "50"]) == 0
    assert "records in         100" in capsys.readouterr().out
    other = tmp_path / "mine"
    other.mkdir()
    (other / "precious.txt").write_text("keep")
    assert main(["demo", str(other), "--engine", "local"]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert (other / "precious.txt").read_text() == "keep"
