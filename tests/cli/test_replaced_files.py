"""``hdfs-region run --available-now`` again and again (cron) on files replaced under a name
already read (``mv new.tmp daily.csv``), appended to in place, reached through a symbolic
link, with the settings changed between runs, and across a kill -9: what the command prints
and publishes, record by record."""

from __future__ import annotations

import os
import posixpath
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from region.fs import FileSystem
from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for
from tests.conftest import CLUSTER_USER, real_fs

SETTINGS = """\
    engine = "local"
    [region]
    trigger = "periodic"
    period = "50ms"
    [scan]
    directory = "{directory}"
    {scan}
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
"""

#: 2023-11-14 22:13:20 UTC, in ns: files landed long before the runs.
T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


def config(pdir: PipelineDir, scan: str = "", directory: str = "landing") -> Path:
    return pdir.write_config(SETTINGS.format(directory=directory, scan=scan))


def land(folder: Path, name: str, lines: list[str], mtime_ns: int | None = None) -> Path:
    """Write ``name`` as a writer that renames its finished file over the old one does."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, folder / name)
    return folder / name


def run(cfg: Path, **env: str) -> tuple[int, list[str]]:
    """One cron run: the records it read and the operators' WARNING/ERROR messages."""
    done = cli("run", str(cfg), "--available-now", "--no-progress", **env)
    assert done.returncode == 0, done.stderr
    # What the scan and the source say (a lock left by a killed run is the lock's business).
    warnings = [
        m.group(1)
        for m in re.finditer(r" (?:WARNING|ERROR) +((?:operators)\.\S+: .*)", done.stderr)
    ]
    summary = done.stdout.strip().splitlines()[-1]
    return int(summary.split("stopped: ", 1)[1].split(" records in", 1)[0]), warnings


def test_cron_runs_read_each_replacement_whole_once_whatever_its_size_and_mtime(
    pdir: PipelineDir,
) -> None:
    """``mv new.tmp daily.csv`` over a file read: the new file is read whole, once, with the
    default ``on_modified``, not counted as changed, also when it has the old one's size and
    mtime second, or the very same mtime (``touch -r``, ``cp -p``): another inode is another
    file."""
    cfg = config(pdir)
    land(pdir.landing, "daily.csv", ["d1 a", "d1 b"])
    assert run(cfg) == (2, [])
    land(pdir.landing, "daily.csv", ["d2 a", "d2 b", "d2 c"])
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    # The same size, in the same mtime second (a new inode).
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d3 a", "d3 b", "d3 c"], old.st_mtime_ns // S * S + 1)
    assert run(cfg) == (3, [])
    # The very same mtime and size: only the inode tells the new file from the one read.
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d4 a", "d4 b", "d4 c"], old.st_mtime_ns)
    assert (pdir.landing / "daily.csv").stat().st_size == old.st_size
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == [
        "D1 A", "D1 B", "D2 A", "D2 B", "D2 C", "D3 A", "D3 B", "D3 C", "D4 A", "D4 B", "D4 C"
    ]  # fmt: skip


def newest_cut(pdir: PipelineDir) -> int:
    cuts = cut_files(pdir.root / "checkpoints" / "pipeline")
    return max((int(p.stem.split("-")[1]) for p in cuts), default=0)


def test_a_kill_9_in_the_middle_of_a_replacement_then_the_next_run_publishes_it_once(
    pdir: PipelineDir,
) -> None:
    """A cron run killed (SIGKILL) after a cut in the middle of a file that replaced one read
    before: the next run resumes it where the cut left it, and every record of the old file
    and of the new one is published once."""
    cfg = config(pdir)
    land(pdir.landing, "daily.csv", [f"old {i:03d}" for i in range(5)])
    assert run(cfg) == (5, [])
    before = newest_cut(pdir)
    new = [f"new {i:04d}" for i in range(3000)]
    land(pdir.landing, "daily.csv", new)
    running = start_cli("run", str(cfg), "--available-now", "--no-progress", PACE="0.001")
    try:
        wait_for(lambda: newest_cut(pdir) > before + 1, what="a cut in the file", alive=running)
        running.send_signal(signal.SIGKILL)
    finally:
        running.communicate()
    assert running.returncode == -signal.SIGKILL
    read, warnings = run(cfg)
    assert 0 < read < 3000 and warnings == []
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == [f"OLD {i:03d}" for i in range(5)] + [n.upper() for n in new]


def test_a_landing_directory_named_through_a_symlink_sees_replacements_made_at_its_real_path(
    pdir: PipelineDir,
) -> None:
    """The settings name ``landing``, a symbolic link to the real folder where the writer
    renames and appends: one file, whichever path names it (the append read once, as the
    content says, with the default settings)."""
    real = pdir.root / "real"
    real.mkdir(parents=True)
    pdir.landing.symlink_to(real, target_is_directory=True)
    cfg = config(pdir)
    land(real, "daily.csv", ["a 1", "a 2"])
    assert run(cfg) == (2, [])
    land(real, "daily.csv", ["b 1"])
    assert run(cfg) == (1, [])
    with (real / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("b 2\n")
    assert run(cfg) == (1, [])
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == ["A 1", "A 2", "B 1", "B 2"]


def moved(warnings: list[str]) -> str:
    """The ``by N.NNNs`` a changed-file warning gives (the test does not choose it)."""
    return warnings[0].split("its mtime moved by ", 1)[1].split(")", 1)[0] if warnings else ""


@pytest.mark.parametrize("on_modified", ["warn", "reread", "new_version"])
def test_an_append_in_place_is_reported_once_and_read_again_only_by_new_version(
    pdir: PipelineDir, on_modified: str
) -> None:
    """``cat more >> daily.csv``: the same inode. Under ``warn`` one WARNING naming it, the
    progress counts it, and nothing is read twice, run after run; ``reread`` reads it whole
    again, once."""
    cfg = config(pdir, f'on_modified = "{on_modified}"')
    land(pdir.landing, "daily.csv", ["a 1", "a 2"])
    assert run(cfg) == (2, [])
    with (pdir.landing / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("a 3\n")
    done = cli("run", str(cfg), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if " WARNING " in line]
    if on_modified == "warn":
        assert "0 records in" in done.stdout
        assert len(warned) == 1
        assert f"file file://{pdir.landing}/daily.csv changed after it was read" in warned[0]
        assert pdir.output_lines() == ["A 1", "A 2"]
    else:
        assert "3 records in" in done.stdout and warned == []
        assert pdir.output_lines() == ["A 1", "A 2", "A 1", "A 2", "A 3"]
    assert run(cfg) == (0, [])
    assert run(cfg) == (0, [])


def test_on_modified_changed_after_a_replacement_reads_nothing_twice(pdir: PipelineDir) -> None:
    """A replacement read under ``warn``, then the settings say ``reread``, then ``warn``
    again: a setting applies to changes found from then on, never to files already read."""
    land(pdir.landing, "daily.csv", ["a 1"])
    land(pdir.landing, "other.csv", ["o 1"])
    assert run(config(pdir)) == (2, [])
    land(pdir.landing, "daily.csv", ["b 1"])
    assert run(config(pdir)) == (1, [])
    reread = config(pdir, 'on_modified = "reread"')
    assert run(reread) == (0, [])
    with (pdir.landing / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("b 2\n")
    assert run(reread) == (2, [])  # changed in place, read again whole as asked
    assert run(config(pdir)) == (0, [])
    assert pdir.output_lines() == ["A 1", "O 1", "B 1", "B 1", "B 2"]


@pytest.mark.parametrize("below_the_window", [False, True], ids=["in the window", "below it"])
def test_a_pattern_narrowed_then_widened_again_reads_nothing_twice(
    pdir: PipelineDir, below_the_window: bool
) -> None:
    """``pattern`` narrowed for a few runs (``*.csv`` left out), then widened back: the files
    read before they were left out are not read again; one that landed meanwhile is read
    once, and so is one that replaced a file read, where its identity is known (in the
    window, or by its content below it (after 256 names more, where only the name is
    known to the scan)."""
    land(pdir.landing, "daily.csv", ["a 1"], T0)
    land(pdir.landing, "kept.csv", ["k 1"], T0)
    old = [f"old-{i:03d}.txt" for i in range(300 if below_the_window else 2)]
    for name in old:
        land(pdir.landing, name, [name], T0 + S)
    land(pdir.landing, "x.txt", ["x 1"])
    assert run(config(pdir)) == (3 + len(old), [])
    narrow = config(pdir, "pattern = '.*[.]txt'")
    assert run(narrow) == (0, [])
    land(pdir.landing, "y.txt", ["y 1"])
    land(pdir.landing, "daily.csv", ["b 1"])  # replaced while left out
    land(pdir.landing, "new.csv", ["n 1"])  # landed while left out
    assert run(narrow) == (1, [])
    assert run(narrow) == (0, [])
    assert run(config(pdir)) == (2, [])
    assert run(config(pdir)) == (0, [])
    assert pdir.output_lines() == [
        "A 1", "K 1", *(n.upper() for n in old), "X 1", "Y 1", "B 1", "N 1"
    ]  # fmt: skip


def put_on(fs: FileSystem, landing: str, name: str, lines: list[str]) -> None:
    """``name`` written whole under a hidden name, then renamed over the old one."""
    tmp = posixpath.join(landing, f".{name}.tmp")
    writer = fs.create(tmp)
    writer.write("".join(f"{line}\n" for line in lines).encode())
    writer.close()
    fs.rename(tmp, posixpath.join(landing, name), overwrite=True)


HDFS_SETTINGS = """\
engine = "local"
[filesystem]
uri = "{uri}"
user = "{user}"
config_dir = "{conf_dir}"
timeout = "5s"
retries = 1
retry_backoff = "100ms"
{webhdfs}
[region]
trigger = "periodic"
period = "50ms"
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{root}/landing"
{scan}
[transform]
function = "pace:shout"
[sink]
file = "{root}/out/part-%FILENUM.txt"
"""


def test_on_hdfs_a_replacement_is_read_whole_once_and_without_webhdfs_each_is_named(
    request: pytest.FixtureRequest, pdir: PipelineDir
) -> None:
    """``on_modified = "warn"`` decides by identity: hdfs:// lists no fileId, and the scan
    reads it through the cluster's WebHDFS for the names found changed. A file renamed over
    one read is read whole once; one appended to is reported. When WebHDFS does not answer,
    the run goes on: WARNINGs say the scan cannot tell replaced from changed in place and
    name each such file, which ``on_modified`` handles (``warn``: not read; ``reread``: read
    whole once)."""
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox (its Hadoop configuration names its WebHDFS)")
    root = posixpath.join(base, f"cli-replaced-{time.monotonic_ns()}")
    landing = posixpath.join(root, "landing")
    fs.mkdirs(landing)

    def put(name: str, lines: list[str]) -> None:
        put_on(fs, landing, name, lines)

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f'webhdfs_uri = "webhdfs://127.0.0.1:{unused.getsockname()[1]}"'

    def settings(webhdfs: str = "", scan: str = 'on_modified = "warn"') -> Path:
        return pdir.write_config(
            HDFS_SETTINGS.format(
                uri=sandbox.info.hdfs,
                user=CLUSTER_USER,
                conf_dir=sandbox.info.conf_dir,
                root=root,
                webhdfs=webhdfs,
                scan=scan,
            )
        )

    daily = fs.display(posixpath.join(landing, "daily.csv"))
    changed = (
        f"operators.scan.cursor: scan: file {daily} changed after it was read (its mtime moved by "
        "{}): what changed is not read (on_modified = 'warn'; 'new_version' reads it again whole)"
    )
    put("daily.csv", ["a 1", "a 2"])
    assert run(settings()) == (2, [])
    put("daily.csv", ["b 1"])
    assert run(settings()) == (1, [])
    time.sleep(0.002)  # HDFS keeps milliseconds: a new mtime for the append
    writer = fs.append(posixpath.join(landing, "daily.csv"))
    writer.write(b"b 2\n")
    writer.close()
    read, warnings = run(settings())
    assert (read, warnings) == (0, [changed.format(moved(warnings))])
    # WebHDFS does not answer: replaced and changed in place look alike, and are said to.
    put("daily.csv", ["c 1"])
    read, warnings = run(settings(dead))
    said = [w for w in warnings if w.startswith("operators.fs.native")]
    said += [w for w in warnings if w.startswith("operators.scan.cursor") and "no fileIds" in w]
    scan = [w for w in warnings if w.startswith("operators.scan.cursor") and w not in said]
    assert read == 0 and len(said) == 2 and "does not answer" in said[0], warnings
    assert "cannot tell a file replaced under a name read from one that grew" in said[1]
    assert (
        "with on_modified = 'warn' or 'fail' a scan cannot tell a file replaced under a name "
        "read from one changed in place" in said[0]
    )
    assert scan == [changed.format(moved(scan))]
    put("daily.csv", ["d 1"])
    read, warnings = run(settings(dead, 'on_modified = "reread"'))
    scan = [w for w in warnings if w.startswith("operators.scan.cursor") and "no fileIds" not in w]
    assert read == 1 and not scan
    assert run(settings(dead, 'on_modified = "reread"'))[0] == 0
    assert run(settings())[0] == 0
    out = posixpath.join(root, "out")
    published = sorted(
        (s for s in fs.list_dir(out) if not s.name.startswith((".", "_"))),
        key=lambda s: int("".join(c for c in s.name if c.isdigit())),
    )
    lines = [line for s in published for line in fs.read(s.path).decode().splitlines()]
    assert lines == ["A 1", "A 2", "B 1", "D 1"]


def test_with_min_file_age_a_file_appended_to_after_it_was_read_is_not_read_twice(
    pdir: PipelineDir,
) -> None:
    """A file read, then appended to in place: young again for ``min_file_age``, it is left
    out of the listings meanwhile but still known, so once old enough its appended line is
    read, not the file again whole as a new file. A file renamed over one read (another
    inode) is read whole once when old enough."""
    # 20 s: a run started at once finds them young even on a loaded machine; then their
    # mtimes are set back rather than waited for.
    cfg = config(pdir, 'min_file_age = "20s"')
    land(pdir.landing, "daily.csv", ["a 1", "a 2"], T0)
    land(pdir.landing, "other.csv", ["o 1"], T0 + S)
    assert run(cfg) == (3, [])
    with (pdir.landing / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("a 3\n")
    land(pdir.landing, "other.csv", ["p 1"])
    assert run(cfg)[0] == 0  # both too young yet (named in the run's WARNING)
    old = time.time_ns() - 21 * 1_000_000_000
    for name in ("daily.csv", "other.csv"):
        os.utime(pdir.landing / name, ns=(old, old + name.startswith("o")))
    assert run(cfg) == (2, [])
    assert run(cfg) == (0, [])
    assert sorted(pdir.output_lines()) == ["A 1", "A 2", "A 3", "O 1", "P 1"]


@pytest.mark.parametrize("webhdfs", [True, False], ids=["HADOOP_CONF_DIR", "bare URI"])
def test_on_hdfs_a_file_replaced_while_the_job_is_down_after_a_cut_in_its_middle(
    request: pytest.FixtureRequest, pdir: PipelineDir, webhdfs: bool
) -> None:
    """A run killed (SIGKILL) after a cut in the middle of ``orders.csv``; a longer new version
    is renamed over it; the next run. hdfs:// lists no fileId, and the source resumed the new
    file at the old offset as if it had grown: with the cluster's configuration (its WebHDFS
    gives the fileId to the scan, which read the new file whole) the rest again from the old
    offset, 12,592-24,880 lines twice; with a bare URI half of it lost, resumed inside a
    record. Now the source compares the leading bytes it read: never resumed into another
    file; and the content decides, with WebHDFS or without: the new version is read whole
    once."""
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox (its Hadoop configuration names its WebHDFS)")
    root = posixpath.join(base, f"cli-replaced-down-{time.monotonic_ns()}")
    landing = posixpath.join(root, "landing")
    fs.mkdirs(landing)

    def put(lines: list[str]) -> None:
        put_on(fs, landing, "orders.csv", lines)

    body = HDFS_SETTINGS.format(
        uri=sandbox.info.hdfs,
        user=CLUSTER_USER,
        conf_dir=sandbox.info.conf_dir,
        root=root,
        webhdfs="",
        scan="",
    )
    if not webhdfs:
        body = body.replace(f'config_dir = "{sandbox.info.conf_dir}"\n', "")
    cfg = pdir.write_config(body)
    cuts = posixpath.join(root, "checkpoints")

    def newest() -> int:
        if not fs.exists(cuts):
            return 0
        found = (re.fullmatch(r"cut-(\d+)\.json", s.name) for s in fs.list_dir(cuts))
        return max((int(m.group(1)) for m in found if m), default=0)

    # Uneven lengths; the new version longer than the old (it had grown, as far as sizes say).
    old = [f"old {i:04d} " + "x" * (i % 13) for i in range(4000)]
    new = [f"new {i:04d} " + "y" * (i % 7) for i in range(9000)]
    put(old)
    running = start_cli(
        "run", str(cfg), "--available-now", "--no-progress", PACE="0.002", **hdfs_env(webhdfs)
    )
    try:
        wait_for(lambda: newest() >= 2, what="cuts in orders.csv", alive=running)
        running.send_signal(signal.SIGKILL)
    finally:
        running.communicate()
    assert running.returncode == -signal.SIGKILL
    put(new)
    done = cli("run", str(cfg), "--available-now", "--no-progress", **hdfs_env(webhdfs))
    assert done.returncode == 0, done.stderr
    out = posixpath.join(root, "out")
    lines = [
        line
        for s in fs.list_dir(out)
        if not s.name.startswith((".", "_"))
        for line in fs.read(s.path).decode().splitlines()
    ]
    assert len(lines) == len(set(lines))
    olds = sorted(line for line in lines if line.startswith("OLD "))
    k = len(olds)
    assert 0 < k < len(old) and olds == [line.upper() for line in old[:k]]
    news = sorted(line for line in lines if not line.startswith("OLD "))
    # Read whole once, with or without the cluster's WebHDFS: the content decides, not an id
    # that hdfs:// does not list (without it, the identity rule dropped the new version).
    assert news == sorted(line.upper() for line in new)
    assert "WARNING  operators.scan.cursor" not in done.stderr


def hdfs_env(webhdfs: bool) -> dict[str, str]:
    """Without the cluster's configuration: no HADOOP_CONF_DIR either."""
    return {} if webhdfs else {"HADOOP_CONF_DIR": ""}
