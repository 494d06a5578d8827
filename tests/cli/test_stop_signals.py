"""Two stop signals to ``hdfs-region run`` (local engine): the exit status and the summary say
whether the run ended on a final cut, and how much it left unpublished when it did not."""

from __future__ import annotations

import re
import signal
import threading
import time

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

SETTINGS = """\
    engine = "local"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1000
"""

SUMMARY = re.compile(r"^stopped: ([\d,]+) records in, ([\d,]+) out(, .*)?$", re.MULTILINE)
UNPUBLISHED = re.compile(r"stopped without a final cut: ([\d,]+) records not published yet")


def count(text: str) -> int:
    return int(text.replace(",", ""))


def test_an_immediate_stop_exits_143_and_says_how_much_is_not_published(
    pdir: PipelineDir,
) -> None:
    pdir.add_files(6, 60)
    config = pdir.write_config(SETTINGS)
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    # Each record takes 20 ms: the signals land in the middle of a batch of 60.
    running = start_cli("run", str(config), "--no-progress", PACE="0.02")
    try:
        wait_for(lambda: cut_files(checkpoints), what="a first cut", alive=running)
        running.send_signal(signal.SIGTERM)
        time.sleep(0.2)  # two signals, not one: the kernel merges a signal still pending
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 143, err
    assert "Stopping immediately" in err
    summary = SUMMARY.search(out)
    assert summary is not None, out
    records_in, records_out = count(summary.group(1)), count(summary.group(2))
    left = UNPUBLISHED.search(out)
    assert left is not None, out
    # Every record read went out; those not published are exactly the ones not in the output.
    assert records_in == records_out
    assert count(left.group(1)) == records_out - len(pdir.output_lines()) > 0
    # The next run publishes the rest, each record once.
    rerun = cli("run", str(config), "--available-now", "--no-progress")
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(pdir.output_lines()) == sorted(r.upper() for r in pdir.records)


def test_a_completed_graceful_stop_exits_0_even_when_a_second_signal_follows(
    pdir: PipelineDir,
) -> None:
    pdir.add_files(3, 20)
    config = pdir.write_config(SETTINGS)
    for attempt, signum in enumerate([signal.SIGTERM, signal.SIGINT, signal.SIGTERM]):
        pdir.add_files(1, 20, prefix=f"a{attempt}-")
        before = len(pdir.output_lines())
        running = start_cli("run", str(config), "--no-progress")
        assert running.stderr is not None
        log: list[str] = []
        reader = threading.Thread(target=log.extend, args=(running.stderr,), daemon=True)
        reader.start()
        try:
            # Recovered: the stop signals are handled from here on (before, one kills at once).
            wait_for(
                lambda lines=log: "Region recovered" in "".join(lines),
                what="recovery",
                alive=running,
            )
            running.send_signal(signum)
            time.sleep(0.05)
            running.send_signal(signum)
            out, _ = running.communicate(timeout=60)
            reader.join(60)
            err = "".join(log)
        finally:
            if running.poll() is None:
                running.kill()
                running.wait()
        # The exit status tells the truth: 0 exactly when the final cut completed.
        summary = SUMMARY.search(out)
        assert summary is not None, (running.returncode, out, err)
        if running.returncode == 0:
            # Everything this run read is published.
            assert "without a final cut" not in out
            published = len(pdir.output_lines()) - before
            assert count(summary.group(1)) == count(summary.group(2)) == published
        else:
            assert running.returncode == 128 + signum, err
            assert UNPUBLISHED.search(out) is not None, out
    rerun = cli("run", str(config), "--available-now", "--no-progress")
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(pdir.output_lines()) == sorted(r.upper() for r in pdir.records)
