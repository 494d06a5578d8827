"""Records never wait unpublished for ever when the input pauses: a file no record reached
for ``[sink] close_idle_after`` (60 s by default) is closed and published by the next cut, on
both engines, without a stop; ``"never"`` keeps it open until a limit or the stop."""

from __future__ import annotations

import signal
import time

import pytest

from tests.cli.conftest import PipelineDir, start_cli, wait_for

SETTINGS = """\
    engine = "{engine}"
    [region]
    trigger = "periodic"
    period = "200ms"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 300
    {idle}
    [spark]
    master = "local[1]"
"""


def published(pdir: PipelineDir) -> list[str]:
    if not pdir.out.exists():
        return []
    return pdir.output_lines()


@pytest.mark.parametrize(
    "engine", ["local", pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]
)
def test_a_paused_input_is_published_once_the_open_file_is_idle(
    pdir: PipelineDir, engine: str
) -> None:
    """1,000 lines land, then nothing: files of 300 lines publish 900 as they fill, and the
    last 100 once their file has been idle for close_idle_after (they waited until the stop
    before: 154 s and more on the local engine, 4 minutes on Spark)."""
    pdir.add_files(1, 1000)
    cfg = pdir.write_config(SETTINGS.format(engine=engine, idle='close_idle_after = "2s"'))
    running = start_cli("run", str(cfg), "--no-progress", "--log-level", "INFO")
    try:
        wait_for(lambda: len(published(pdir)) >= 900, timeout=180, alive=running)
        wait_for(lambda: len(published(pdir)) == 1000, timeout=60, alive=running)
        lines = published(pdir)
        assert sorted(lines) == sorted(set(lines)) and len(lines) == 1000
        assert running.poll() is None  # published while it runs, not at its stop
    finally:
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=120)
    assert running.returncode == 0, err
    assert sorted(published(pdir)) == sorted(
        line for f in pdir.landing.iterdir() for line in f.read_text().splitlines()
    )


def test_never_keeps_the_file_open_until_the_stop(pdir: PipelineDir) -> None:
    pdir.add_files(1, 1000)
    cfg = pdir.write_config(SETTINGS.format(engine="local", idle='close_idle_after = "never"'))
    running = start_cli("run", str(cfg), "--no-progress")
    try:
        wait_for(lambda: len(published(pdir)) >= 900, timeout=120, alive=running)
        time.sleep(3)  # past what close_idle_after = "2s" waits above
        assert len(published(pdir)) == 900
    finally:
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=120)
    assert running.returncode == 0, err
    assert len(published(pdir)) == 1000
