"""A runner whose lock heartbeat dies (any exception, no lease file) stops before its lock can
lapse, and the runner that takes over finishes the job: every record published exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from bench.campaign.heartbeat import BROKEN_HEARTBEAT
from operators.fs.local import LocalFileSystem
from region.lock import CheckpointLock
from tests.cli.conftest import PipelineDir, cli, cli_env, cut_files, wait_for

SETTINGS = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    lock_ttl = "3s"
    [scan]
    directory = "landing"
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 40
"""


@pytest.mark.parametrize(
    "engine", ["local", pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]
)
def test_a_runner_whose_heartbeat_dies_stops_before_a_second_runner_takes_over(
    pdir: PipelineDir, engine: str
) -> None:
    pdir.add_files(8, 40)
    config = pdir.write_config(SETTINGS.format(engine=engine))
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    script = pdir.root / "broken_heartbeat.py"
    script.write_text(BROKEN_HEARTBEAT, encoding="utf-8")
    # 1. The first runner (streaming, slowed down so it still has work when its lock lapses).
    first = subprocess.Popen(
        [sys.executable, str(script), "run", str(config), "--no-progress"],
        env=cli_env(PACE="0.02"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: (
                (h := CheckpointLock(LocalFileSystem(), str(checkpoints)).holder()) is not None
                and h.pid == first.pid
            ),
            what="the first runner's lock",
            alive=first,
        )
        if engine == "local":  # (a Spark run loses its lock while its JVM starts)
            wait_for(lambda: cut_files(checkpoints), what="a first cut", alive=first)
        # 2. A second runner on the same settings, tried until it gets the lock.
        deadline = time.monotonic() + 60
        while True:
            second = cli("run", str(config), "--available-now", "--no-progress", timeout=300)
            if second.returncode == 0:
                break
            assert "is locked by" in second.stderr, second.stderr
            assert time.monotonic() < deadline, "the second runner never got the lock"
            time.sleep(0.2)
        # 3. The first runner stops by itself (it wrote nothing while its lock was unsafe, and
        #    learns at its next heartbeat that the second runner holds it), naming why.
        try:
            first_code: int | None = first.wait(timeout=60)
        except subprocess.TimeoutExpired:
            first_code = None
            first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=300)
        assert first_code == 1, err
        assert "hdfs-region: error:" in err and "ValueError" in err, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # 4. Every record once.
    expected = sorted(r.upper() for r in pdir.records)
    assert sorted(pdir.output_lines()) == expected
