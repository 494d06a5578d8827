"""Files that land late (an mtime older than files already read), under the default settings,
while the job is killed with SIGKILL and restarted: on both engines every record is published
once. With ``late_window = 0`` (IBM's strict rule) a late file is passed over, never silently."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, cli_env, wait_for

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000

LOCAL = """\
    engine = "local"
    [region]
    period = "60ms"
    [scan]
    directory = "landing"
    sleep_time = "50ms"
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 45
"""

SPARK = """\
    engine = "spark"
    [region]
    period = "200ms"
    [scan]
    directory = "landing"
    [transform]
    sql = "SELECT upper(value) AS value FROM input"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 45
"""


class Arrivals:
    """Files landing by write-then-rename, on time or late by 10 s or by 2 hours."""

    def __init__(self, pdir: PipelineDir, seed: int) -> None:
        self.pdir = pdir
        self.rng = random.Random(seed)
        self.newest = T0
        self.files: dict[str, list[str]] = {}

    def land(self) -> None:
        kind = self.rng.choice(["on_time", "on_time", "tie", "late_10s", "late_2h"])
        mtime = {
            "on_time": self.newest + S,
            "tie": self.newest,
            "late_10s": self.newest - 10 * S,
            "late_2h": self.newest - 7200 * S,
        }[kind]
        self.newest = max(self.newest, mtime)
        name = f"{kind}-{len(self.files):03d}.txt"
        lines = [f"{name}-{j:03d}" for j in range(self.rng.randint(1, 60))]
        landing = self.pdir.landing
        landing.mkdir(parents=True, exist_ok=True)
        hidden = landing / f".{name}.tmp"  # hidden while written, as copy tools do
        hidden.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        os.utime(hidden, ns=(mtime, mtime))
        hidden.rename(landing / name)
        self.files[name] = lines

    def check(self, got: list[str]) -> None:
        """Every record once, and the records of each file in their order."""
        expected = [line.upper() for lines in self.files.values() for line in lines]
        assert len(got) == len(set(got)), "a record was published twice"
        missing = sorted(set(expected) - set(got))
        assert not missing, f"{len(missing)} records lost, e.g. {missing[:3]}"
        assert sorted(got) == sorted(expected)
        where = {line: i for i, line in enumerate(got)}
        for lines in self.files.values():
            places = [where[line.upper()] for line in lines]
            assert places == sorted(places)


def start(config: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "operators.app", "run", str(config), "--no-progress"],
        env=cli_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # one process group: the run and, on Spark, its JVM
    )


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.parametrize(
    ("engine", "rounds"),
    [pytest.param("local", 4, id="local"), pytest.param("spark", 1, marks=pytest.mark.spark)],
)
def test_sigkill_while_files_land_late_publishes_every_record_once(
    pdir: PipelineDir, engine: str, rounds: int
) -> None:
    arrivals = Arrivals(pdir, seed=11 if engine == "local" else 12)
    for _ in range(4):
        arrivals.land()
    config = pdir.write_config(LOCAL if engine == "local" else SPARK)
    for _ in range(rounds):
        before = len(pdir.output_lines())
        proc = start(config, PACE="0.001")
        try:
            wait_for(
                lambda before=before: len(pdir.output_lines()) > before,
                timeout=240,
                what="output of this run",
            )
            # Files land while it runs, and it is killed at a random moment among them.
            for _ in range(arrivals.rng.randint(2, 6)):
                arrivals.land()
                time.sleep(arrivals.rng.uniform(0.0, 0.3))
        finally:
            kill(proc)
        for _ in range(3):  # and while it is down
            arrivals.land()
    done = cli("run", str(config), "--available-now", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "passed over" not in done.stderr
    arrivals.check(pdir.output_lines())


def test_strict_window_passes_a_late_file_over_with_a_warning_a_count_or_an_error(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("b.txt", ["b1", "b2"])
    config = pdir.write_config(LOCAL.replace('sleep_time = "50ms"', "late_window = 0"))
    first = cli("run", str(config), "--available-now", "--no-progress")
    assert first.returncode == 0, first.stderr
    late = pdir.landing / "a.txt"
    late.write_text("a1\n")
    os.utime(late, ns=(T0 - 30 * S, T0 - 30 * S))
    second = cli("run", str(config), "--available-now")
    assert second.returncode == 0, second.stderr
    assert "landing/a.txt landed late (its mtime is 31.000s before the newest file read)" in (
        second.stderr
    )
    assert "1 PASSED OVER" in second.stderr  # the progress line
    assert pdir.output_lines() == ["B1", "B2"]
    shown = cli("inspect", str(pdir.root / "checkpoints" / "pipeline"))
    assert '"passed_over": 1' in shown.stdout
    # on_late_file = "fail": the same file stops the run, named, and nothing moves on.
    strict = LOCAL.replace('sleep_time = "50ms"', 'late_window = 0\non_late_file = "fail"')
    failing = pdir.write_config(
        strict.replace("[region]", '[region]\ncheckpoint_dir = "checkpoints/pipeline"'), "f.toml"
    )
    pdir.add_file("c.txt", ["c1"])
    late.rename(pdir.landing / "a2.txt")
    failed = cli("run", str(failing), "--available-now", "--no-progress")
    assert failed.returncode != 0
    assert "a2.txt landed late" in failed.stderr and "on_late_file = 'fail': move" in failed.stderr


def test_more_late_files_than_the_census_tells_apart_are_counted_not_lost_silently(
    pdir: PipelineDir,
) -> None:
    """600 files land an hour late while the job is down: more than the census resolves. Those
    it can name are read; the others are passed over, counted, with a WARNING."""
    for i in range(20):
        pdir.add_file(f"on-time-{i:02d}.txt", [f"on-time-{i:02d}"])
    config = pdir.write_config(LOCAL.replace('sleep_time = "50ms"', 'late_window = "1s"'))
    first = cli("run", str(config), "--available-now", "--no-progress")
    assert first.returncode == 0, first.stderr
    for i in range(600):
        late = pdir.landing / f"late-{i:03d}.txt"
        late.write_text(f"late-{i:03d}\n")
        os.utime(late, ns=(T0 - 3600 * S, T0 - 3600 * S))
    second = cli("run", str(config), "--available-now")
    assert second.returncode == 0, second.stderr
    assert "changed while the scan was stopped than its census tells apart" in second.stderr
    read = [line for line in pdir.output_lines() if line.startswith("LATE-")]
    assert len(read) == len(set(read))
    shown = cli("inspect", str(pdir.root / "checkpoints" / "pipeline"))
    passed_over = 600 - len(read)
    assert passed_over > 0 and f'"passed_over": {passed_over}' in shown.stdout
    assert f"at least {passed_over} file(s) that landed then are passed over" in second.stderr
    assert f"{passed_over} PASSED OVER" in second.stderr


@pytest.mark.parametrize("policy", ["continue", "warn"])
def test_a_file_that_grows_after_it_was_read_is_never_read_twice(
    pdir: PipelineDir, policy: str
) -> None:
    """A writer that appends to the final name (``echo >>``) while the job runs. With the
    default ``on_modified = "continue"`` each append is read once, after the lines before it;
    with ``"warn"`` the file is read once and each change is a WARNING and a count. Nothing is
    read twice, also after a restart."""
    pdir.add_file("log.txt", [f"line-{i:03d}" for i in range(10)])
    body = LOCAL.replace("tuples_per_file = 45", "close_on_punct = true")
    body = body.replace('sleep_time = "50ms"', f'sleep_time = "50ms"\n    on_modified = "{policy}"')
    config = pdir.write_config(body)
    appended = [f"MORE-{round_}-{i}" for round_ in range(3) for i in range(5)]
    first = [f"LINE-{i:03d}" for i in range(10)]
    proc = start(config, PACE="0")
    try:
        wait_for(lambda: len(pdir.output_lines()) >= 10, what="the first read")
        log = pdir.landing / "log.txt"
        for round_ in range(3):
            with log.open("a") as f:
                f.write("".join(f"more-{round_}-{i}\n" for i in range(5)))
            mtime = T0 + (10 + round_) * S  # each append moves the mtime
            os.utime(log, ns=(mtime, mtime))
            if policy == "continue":
                want = 15 + 5 * round_
                wait_for(lambda want=want: len(pdir.output_lines()) >= want, what="the append")
            else:
                time.sleep(0.4)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    got = pdir.output_lines()
    assert got == (first + appended if policy == "continue" else first)
    again = cli("run", str(config), "--available-now")
    assert again.returncode == 0, again.stderr
    assert "changed after it was read" not in again.stderr  # reported once, also after a restart
    if policy == "warn":
        shown = cli("inspect", str(pdir.root / "checkpoints" / "pipeline"))
        assert '"modified": ' in shown.stdout and '"modified": 0' not in shown.stdout
    assert pdir.output_lines() == got
