"""The messages the docs show are the ones a real run prints: a second runner refused by the
lock (docs/troubleshooting.md) and ``switch`` with a job running and with none
(docs/getting-started.md). The pages show the run's own values as ``<placeholders>``; the test
puts the same placeholders into what the commands printed and looks the line up in the page."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from tests.cli.conftest import PipelineDir, cli, start_cli, wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs"

CONFIG = """\
    engine = "local"
    [region]
    period = "100ms"
    checkpoint_dir = "checkpoints"
    [scan]
    directory = "landing"
    sleep_time = "100ms"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1
"""

#: A lock holder as ``LockHolder.describe`` writes it.
HOLDER = re.compile(
    r"\S+:\d+ \(host \S+, pid \d+, started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, "
    r"last heartbeat \d+\.\ds ago, ttl 30s\)"
)
HOLDER_SHOWN = (
    "<host>:<pid> (host <host>, pid <pid>, started <time>, last heartbeat <seconds>s ago, ttl 30s)"
)


def documented(text: str, values: dict[str, str]) -> str:
    """``text`` with the run's own values replaced by the docs' placeholders."""
    for value, placeholder in values.items():
        text = text.replace(value, placeholder)
    text = HOLDER.sub(HOLDER_SHOWN, text)
    # The command as this run was started (`python -m operators.app`): the docs show its name.
    text = re.sub(r"[^\s(`]+ -m operators\.app\b", "hdfs-region", text)
    return re.sub(r"expires in \d+s", "expires in <seconds>s", text)


def one_line(output: str) -> str:
    lines = output.splitlines()
    assert len(lines) == 1, output
    return lines[0]


def error_line(output: str) -> str:
    """The one error line among the log lines a run wrote before it."""
    lines = [line for line in output.splitlines() if line.startswith("hdfs-region: error: ")]
    assert len(lines) == 1, output
    return lines[0]


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_the_lock_and_switch_messages_in_the_docs_are_what_a_run_prints(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("a.txt", ["a1"])
    config = pdir.write_config(CONFIG)
    checkpoints = pdir.root / "checkpoints"
    other = pdir.root / "other"
    other.mkdir()
    values = {
        f"file://{checkpoints}": "<checkpoint dir>",
        f"file://{other}": "<directory>",
        str(config): "CONFIG.toml",
    }
    running = start_cli("run", str(config), "--no-progress")
    try:
        wait_for(lambda: pdir.output_lines() == ["a1"], what="a.txt published", alive=running)

        second = cli("run", str(config), "--no-progress")
        assert second.returncode == 1, second.stderr
        locked = documented(error_line(second.stderr), values)
        assert locked in page("troubleshooting.md"), locked

        switched = cli("switch", str(config), str(other))
        assert switched.returncode == 0, switched.stderr
        requested = documented(one_line(switched.stdout), values)
        assert requested in page("getting-started.md"), requested
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=60)
    assert running.returncode == 0

    pending = cli("switch", str(config), str(other))
    assert pending.returncode == 3, pending.stderr
    shown = documented(one_line(pending.stdout), values)
    assert shown in page("getting-started.md"), shown
