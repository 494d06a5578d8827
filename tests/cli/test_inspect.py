"""``hdfs-region inspect``: the cuts of a checkpoint directory and the newest operator states;
and credentials never appear in anything a run prints or writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators.app.cli import main
from tests.cli.conftest import PipelineDir, cli, cut_files

SETTINGS = """\
    engine = "local"
    [region]
    retain = 3
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 25
"""


def run_twice(pdir: PipelineDir) -> Path:
    """Three cuts (two runs, files added between them); return the checkpoint directory."""
    pdir.add_files(2, 20)
    config = pdir.write_config(SETTINGS)
    assert cli("run", str(config), "--available-now").returncode == 0
    pdir.add_files(1, 20, prefix="g")
    assert cli("run", str(config), "--available-now").returncode == 0
    assert cli("run", str(config), "--available-now").returncode == 0
    return pdir.root / "checkpoints" / "pipeline"


def test_inspect_lists_cuts_and_the_newest_states(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints = run_twice(pdir)
    assert main(["inspect", str(checkpoints)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint directory file://{checkpoints}" in out
    assert "lock: free" in out
    assert "3 cut(s), oldest first:" in out
    rows = [line.split() for line in out.splitlines() if line.strip().endswith("valid")]
    assert [int(r[0]) for r in rows] == [1, 2, 3]
    assert "newest valid cut 3" in out
    # The operator states, as the next run will restore them.
    assert "operator 'source':" in out and "operator 'sink':" in out
    assert '"name": "g002.txt"' in out  # the scan's key: the last file read
    assert '"next_filenum": 3' in out  # 60 records in files of 25


def test_inspect_says_why_a_cut_is_not_valid_and_uses_the_one_before(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints = run_twice(pdir)
    newest = cut_files(checkpoints)[-1]
    newest.write_bytes(newest.read_bytes()[:40])
    assert main(["inspect", str(checkpoints)]) == 0
    out = capsys.readouterr().out
    assert "NOT VALID: truncated" in out
    assert "newest valid cut 2" in out
    for cut in cut_files(checkpoints):
        cut.write_text("{}")
    assert main(["inspect", str(checkpoints)]) == 1
    out = capsys.readouterr().out
    assert "NOT VALID: garbage: no format version" in out
    assert "no valid cut" in out


def test_inspect_through_the_settings_file_and_of_nothing(
    pdir: PipelineDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_twice(pdir)
    assert main(["inspect", str(pdir.root / "pipeline.toml")]) == 0
    assert "newest valid cut 3" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "nowhere")]) == 1
    assert "no checkpoint directory file://" in capsys.readouterr().err


def test_inspect_of_a_directory_without_checkpoints_lists_none_of_its_links(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "hosts").write_text("127.0.0.1 localhost\n", encoding="utf-8")
    (plain / "os-release").symlink_to(plain / "hosts")
    (plain / "mtab").symlink_to("/proc/mounts")
    done = cli("inspect", str(plain))
    assert done.returncode == 0, done.stderr
    assert "no checkpoints" in done.stdout
    assert "os-release" not in done.stdout + done.stderr
    assert "mtab" not in done.stdout + done.stderr


def test_inspect_names_the_running_holder(pdir: PipelineDir) -> None:
    import signal

    from tests.cli.conftest import start_cli, wait_for

    pdir.add_files(1, 5)
    config = pdir.write_config(SETTINGS)
    running = start_cli("run", str(config))
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    try:
        wait_for(lambda: bool(cut_files(checkpoints)) or running.poll() is not None, what="a cut")
        shown = cli("inspect", str(checkpoints))
        assert shown.returncode == 0
        assert f"pid {running.pid}" in shown.stdout and "lock: " in shown.stdout
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=60)


def test_credentials_appear_in_no_output_log_or_file(pdir: PipelineDir) -> None:
    secret_password = "pw-Xq7Vb9-never-print"
    secret_token = "tok-Zr4Kd2-never-print"
    pdir.add_files(2, 10)
    config = pdir.write_config(
        SETTINGS
        + f"""\
    [filesystem]
    user = "etl"
    password = "{secret_password}"
    token = "{secret_token}"
    """
    )
    texts = []
    for args in (
        ("run", str(config), "--available-now", "--log-level", "DEBUG"),
        ("inspect", str(pdir.root / "checkpoints" / "pipeline")),
        ("inspect", str(config)),
    ):
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        texts += [done.stdout, done.stderr]
    assert len(pdir.output_lines()) == 20
    for path in pdir.root.rglob("*"):
        if path.is_file() and path.name != "pipeline.toml":
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    for text in texts:
        assert secret_password not in text
        assert secret_token not in text
    assert json.loads(cut_files(pdir.root / "checkpoints" / "pipeline")[-1].read_text())
