"""``on_modified = "continue"``: what was read is remembered by content, and every byte that
lands is read once however it lands. Cron-style runs (``run --available-now`` once an "hour",
the files' mtimes an hour apart) on five files landing five ways, each line published once."""

from __future__ import annotations

import collections
import os
import posixpath
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from region.fs import FileSystem
from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for
from tests.cli.test_replaced_files import HDFS_SETTINGS
from tests.conftest import CLUSTER_USER, real_fs

SETTINGS = """\
    engine = "{engine}"
    [region]
    trigger = "periodic"
    period = "50ms"
    [scan]
    directory = "landing"
    on_modified = "continue"
    [sink]
    file = "out/part-%FILENUM.txt"
""".replace("{engine}", "local")
#: The same on Spark.
SPARK_SETTINGS = SETTINGS.replace('engine = "local"', 'engine = "spark"')
#: Every byte read compared, not two windows of it.
EXACT = '    on_modified = "continue"\n    content_check = "exact"'

#: 2023-11-14 22:13:20 UTC: the first "hour".
T0 = 1_700_000_000
HOUR = 3600


def _lines(tag: str, hour: int, count: int) -> list[str]:
    return [f"{tag} h{hour} {i}" for i in range(count)]


def _write(path: Path, lines: list[str], *, mode: str = "w") -> None:
    with path.open(mode, encoding="utf-8") as out:
        out.write("".join(f"{line}\n" for line in lines))


def _stamp(path: Path, seconds: int) -> None:
    os.utime(path, (seconds, seconds))


class LocalDisk:
    """The five landings' operations on the local disk."""

    def __init__(self, landing: Path) -> None:
        landing.mkdir(parents=True, exist_ok=True)
        self.landing = landing

    def write(self, name: str, lines: list[str], *, append: bool = False) -> None:
        _write(self.landing / name, lines, mode="a" if append else "w")

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.landing / src, self.landing / dst)

    def copy(self, src: str, dst: str) -> None:
        shutil.copyfile(self.landing / src, self.landing / dst)

    def truncate(self, name: str) -> None:
        os.truncate(self.landing / name, 0)

    def stamp(self, name: str, seconds: int) -> None:
        _stamp(self.landing / name, seconds)


class Hdfs:
    """The same on hdfs:// through the project's client (mtimes set by the NameNode's setTimes)."""

    def __init__(self, fs: FileSystem, landing: str) -> None:
        fs.mkdirs(landing)
        self.fs, self.landing = fs, landing

    def _path(self, name: str) -> str:
        return posixpath.join(self.landing, name)

    def write(self, name: str, lines: list[str], *, append: bool = False) -> None:
        path = self._path(name)
        data = "".join(f"{line}\n" for line in lines).encode()
        if append and self.fs.exists(path):
            writer = self.fs.append(path)
        else:
            writer = self.fs.create(path, overwrite=True)
        writer.write(data)
        writer.close()

    def rename(self, src: str, dst: str) -> None:
        self.fs.rename(self._path(src), self._path(dst), overwrite=True)

    def copy(self, src: str, dst: str) -> None:
        data = self.fs.read(self._path(src))
        writer = self.fs.create(self._path(dst), overwrite=True)
        writer.write(data)
        writer.close()

    def truncate(self, name: str) -> None:
        self.fs.truncate(self._path(name), 0)

    def stamp(self, name: str, seconds: int) -> None:
        self.fs.client.set_times(self._path(name), seconds * 1000, seconds * 1000)  # type: ignore[attr-defined]


class FiveFiles:
    """The five landings; ``landed`` holds every line written, once each."""

    def __init__(self, disk: LocalDisk | Hdfs) -> None:
        self.disk = disk
        self.landed: list[str] = []
        self.cumulative: list[str] = []

    def hour(self, h: int) -> None:
        at = T0 + h * HOUR
        d = self.disk
        # events.log: a log that grows.
        new = _lines("events", h, 20)
        d.write("events.log", new, append=True)
        d.stamp("events.log", at)
        self.landed += new
        # cumulative.csv: every row so far, written anew and moved over the name.
        new = _lines("cumulative", h, 10)
        self.cumulative += new
        d.write(".cumulative.tmp", self.cumulative)
        d.stamp(".cumulative.tmp", at)
        d.rename(".cumulative.tmp", "cumulative.csv")
        self.landed += new
        # orders.csv: the hour's export, cp over the name (same inode) in odd hours and mv
        # over it in even ones.
        new = _lines("orders", h, 15)
        if h % 2:
            d.write("orders.csv", new)  # truncate and write: what cp does to the target
        else:
            d.write(".orders.tmp", new)
            d.rename(".orders.tmp", "orders.csv")
        d.stamp("orders.csv", at)
        self.landed += new
        # app.log: rotated by copytruncate (copied away, truncated, written again).
        if h > 1:
            d.copy("app.log", f"app.log.{h - 1}")
            d.stamp(f"app.log.{h - 1}", at - 2)
            d.truncate("app.log")
        new = _lines("app", h, 18)
        d.write("app.log", new, append=True)
        d.stamp("app.log", at)
        self.landed += new
        # svc.log: rotated by rename (svc.log -> svc.log.1, logrotate's default), a new one.
        if h > 1:
            for n in range(h - 2, 0, -1):
                d.rename(f"svc.log.{n}", f"svc.log.{n + 1}")
            d.rename("svc.log", "svc.log.1")
        new = _lines("svc", h, 12)
        d.write("svc.log", new)
        d.stamp("svc.log", at)
        self.landed += new


def _run(cfg: Path) -> None:
    done = cli("run", str(cfg), "--available-now", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr


def _five_runs(files: FiveFiles, cfg: Path, published: Callable[[], list[str]]) -> None:
    """5 runs an hour apart, every line once after each."""
    for h in range(1, 6):
        files.hour(h)
        _run(cfg)
        counted = collections.Counter(published())
        twice = {line: n for line, n in counted.items() if n > 1}
        missing = set(files.landed) - set(counted)
        assert not twice, f"hour {h}: read twice: {sorted(twice)[:5]} ({len(twice)})"
        assert not missing, f"hour {h}: never read: {sorted(missing)[:5]} ({len(missing)})"
    assert len(published()) == len(files.landed) == 5 * (20 + 10 + 15 + 18 + 12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings",
    [
        pytest.param(SETTINGS, id="local"),
        pytest.param(SPARK_SETTINGS, marks=pytest.mark.spark, id="spark"),
        # The planner's exact check: tests/spark/test_source_plan.py.
        pytest.param(SETTINGS.replace('    on_modified = "continue"', EXACT), id="local-exact"),
    ],
)
def test_five_files_landing_five_ways_in_cron_runs_are_each_read_once(
    pdir: PipelineDir, settings: str
) -> None:
    """Appended, a cumulative export moved over its name, an export copied or moved over its
    name, copytruncate and rename rotation: every line once, on both engines, and under the
    exact content check."""
    cfg = pdir.write_config(settings)
    _five_runs(FiveFiles(LocalDisk(pdir.landing)), cfg, pdir.output_lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "check"),
    [
        pytest.param("local", "windows", id="local"),
        pytest.param("spark", "windows", marks=pytest.mark.spark, id="spark"),
        pytest.param("local", "exact", id="local-exact"),
    ],
)
def test_on_hdfs_five_files_landing_five_ways_in_cron_runs_are_each_read_once(
    request: pytest.FixtureRequest, pdir: PipelineDir, engine: str, check: str
) -> None:
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox")
    root = posixpath.join(base, f"cli-by-content-{time.monotonic_ns()}")
    body = HDFS_SETTINGS.format(
        uri=sandbox.info.hdfs,
        user=CLUSTER_USER,
        conf_dir=sandbox.info.conf_dir,
        root=root,
        webhdfs="",
        scan=f'on_modified = "continue"\ncontent_check = "{check}"',
    ).replace('[transform]\nfunction = "pace:shout"\n', "")
    cfg = pdir.write_config(body.replace('engine = "local"', f'engine = "{engine}"'))
    out = posixpath.join(root, "out")

    def published() -> list[str]:
        return [
            line
            for s in fs.list_dir(out)
            if not s.name.startswith((".", "_"))
            for line in fs.read(s.path).decode().splitlines()
        ]

    _five_runs(FiveFiles(Hdfs(fs, posixpath.join(root, "landing"))), cfg, published)


Landing = Callable[[Path], None]


def _append(path: Path) -> None:
    _write(path, ["appended 1", "appended 2"], mode="a")


def _same_name_other_content(path: Path) -> None:
    _write(path, ["other 1", "other 2", "other 3"])


@pytest.mark.parametrize(
    ("change", "read_again"),
    [
        pytest.param(_append, ["appended 1", "appended 2"], id="appended: the new lines"),
        pytest.param(
            _same_name_other_content,
            ["other 1", "other 2", "other 3"],
            id="written over in place: the new file whole",
        ),
    ],
)
def test_a_file_read_before_continues_where_its_content_was_read_to(
    pdir: PipelineDir, change: Landing, read_again: list[str]
) -> None:
    cfg = pdir.write_config(SETTINGS)
    pdir.landing.mkdir(parents=True)
    path = pdir.landing / "a.log"
    _write(path, ["first 1", "first 2"])
    _stamp(path, T0)
    _run(cfg)
    change(path)
    _stamp(path, T0 + HOUR)
    _run(cfg)
    assert sorted(pdir.output_lines()) == sorted(["first 1", "first 2", *read_again])


def test_the_same_bytes_under_two_names_at_once_are_two_files(pdir: PipelineDir) -> None:
    """Only a path that no longer holds what was read there gives its memory away: two
    sensors sending the same lines are both read."""
    cfg = pdir.write_config(SETTINGS)
    pdir.landing.mkdir(parents=True)
    _write(pdir.landing / "a.txt", ["same 1", "same 2"])
    _stamp(pdir.landing / "a.txt", T0)
    _run(cfg)
    _write(pdir.landing / "b.txt", ["same 1", "same 2"])
    _stamp(pdir.landing / "b.txt", T0 + HOUR)
    _run(cfg)
    assert sorted(pdir.output_lines()) == ["same 1", "same 1", "same 2", "same 2"]


PACED = SETTINGS.replace("[sink]", '[transform]\n    function = "pace:shout"\n    [sink]')


def _rotate_by_rename(landing: Path) -> None:
    os.replace(landing / "svc.log", landing / "svc.log.1")
    _write(landing / "svc.log", [f"new {i:05d}" for i in range(300)])


def _rotate_by_copytruncate(landing: Path) -> None:
    shutil.copyfile(landing / "svc.log", landing / "svc.log.1")
    os.truncate(landing / "svc.log", 0)
    _write(landing / "svc.log", [f"new {i:05d}" for i in range(300)], mode="a")


@pytest.mark.slow
@pytest.mark.parametrize(
    "rotate",
    [
        pytest.param(_rotate_by_rename, id="renamed away"),
        pytest.param(_rotate_by_copytruncate, id="copytruncate"),
    ],
)
def test_a_log_rotated_while_the_job_is_down_after_a_cut_in_its_middle_is_read_once(
    pdir: PipelineDir, rotate: Landing
) -> None:
    """kill -9 after cuts in the middle of ``svc.log``; it is rotated while the job is down;
    the rotated copy continues where the cut left the old name, and the new ``svc.log`` is
    read whole: every line once (the old rule read the copy whole: the cut's lines twice)."""
    cfg = pdir.write_config(PACED)
    pdir.landing.mkdir(parents=True)
    old = [f"old {i:05d} " + "x" * (i % 11) for i in range(6000)]
    _write(pdir.landing / "svc.log", old)
    running = start_cli("run", str(cfg), "--available-now", "--no-progress", PACE="0.001")
    try:
        wait_for(
            lambda: len(cut_files(pdir.root / "checkpoints" / "pipeline")) >= 3,
            what="cuts in svc.log",
            alive=running,
        )
        running.send_signal(signal.SIGKILL)
    finally:
        running.communicate()
    assert running.returncode == -signal.SIGKILL
    newest = cut_files(pdir.root / "checkpoints" / "pipeline")[-1].read_text()
    assert re.search(r'"offset":[1-9]', newest), "the last cut is in the middle of svc.log"
    rotate(pdir.landing)
    _run(cfg)
    got = collections.Counter(pdir.output_lines())
    expected = [line.upper() for line in old] + [f"NEW {i:05d}" for i in range(300)]
    assert got == collections.Counter(expected)


SPARK_PACED = """\
    engine = "spark"
    [region]
    period = "200ms"
    [scan]
    directory = "landing"
    [spark]
    max_bytes_per_trigger = 16000
    [transform]
    sql = "SELECT upper(value) AS value FROM input"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 400
"""


@pytest.mark.slow
@pytest.mark.spark
def test_on_spark_a_log_rotated_while_the_job_is_down_mid_file_is_read_once(
    pdir: PipelineDir,
) -> None:
    """Batches of 16 kB read ``svc.log`` a range at a time; kill -9 after some; it is rotated by
    rename while the job is down: the rotated copy continues where the last batch planned the
    old name to (the default settings), the new file is read whole."""
    cfg = pdir.write_config(SPARK_PACED)
    pdir.landing.mkdir(parents=True)
    old = [f"old {i:05d} " + "x" * (i % 11) for i in range(12000)]
    _write(pdir.landing / "svc.log", old)
    running = start_cli("run", str(cfg), "--no-progress")
    try:
        wait_for(
            lambda: len(pdir.output_lines()) >= 1200,
            timeout=240,
            what="batches of svc.log",
            alive=running,
        )
        running.send_signal(signal.SIGKILL)
    finally:
        running.communicate()
    published = len(pdir.output_lines())
    assert published < len(old), "killed in the middle of svc.log"
    _rotate_by_rename(pdir.landing)
    _run(cfg)
    got = collections.Counter(pdir.output_lines())
    expected = [line.upper() for line in old] + [f"NEW {i:05d}" for i in range(300)]
    assert got == collections.Counter(expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings", [SETTINGS, pytest.param(SPARK_SETTINGS, marks=pytest.mark.spark, id="spark")]
)
def test_lines_written_in_pieces_while_the_job_reads_are_never_split(
    pdir: PipelineDir, settings: str
) -> None:
    """A writer flushes each line in two pieces while the job runs: every line is published
    once, whole (the piece before the newline is held). The file's last line never gets its
    newline: the next ``--available-now`` run waits the hold and publishes it as it is."""
    cfg = pdir.write_config(
        settings.replace(
            '"continue"', '"continue"\n    hold_partial_line = "2s"\n    sleep_time = "20ms"'
        )
    )
    pdir.landing.mkdir(parents=True)
    log = pdir.landing / "app.log"
    log.touch()
    lines = [f"line {i:04d} " + "x" * (i % 17) for i in range(400)]
    running = start_cli("run", str(cfg), "--no-progress")
    checkpoints = pdir.root / "checkpoints"
    try:
        # Running: a cut (local), the query's metadata (Spark).
        wait_for(
            lambda: any(
                p.name == "metadata" or p.suffix == ".json" for p in checkpoints.rglob("*")
            ),
            timeout=240,
            what="the job running",
            alive=running,
        )
        time.sleep(1.0)
        with log.open("a", encoding="utf-8") as out:
            for line in lines:
                half = len(line) // 2
                out.write(line[:half])
                out.flush()
                time.sleep(0.003)
                out.write(line[half:] + "\n")
                out.flush()
            out.write("the last line, never ended")
        # Read while written (listed every 20 ms), then stopped: the final cut publishes
        # what was read.
        time.sleep(1.0)
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=120)
    _run(cfg)
    assert pdir.output_lines() == [*lines, "the last line, never ended"]
