"""One job per output directory: a second job, or the same job started over from deleted
checkpoints, is refused at start instead of deleting the first one's files or skipping its own
batches (``operators.sink.owner``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.conftest import PipelineDir, cli, start_cli, wait_for

JOB = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    checkpoint_dir = "{checkpoints}"
    [scan]
    directory = "{landing}"
    [sink]
    file = "out/{prefix}-%FILENUM.txt"
    tuples_per_file = 40
    {transform}
"""


def job(
    pdir: PipelineDir,
    name: str,
    *,
    landing: str,
    engine: str = "local",
    prefix: str = "a",
    transform: str = "",
) -> Path:
    body = JOB.format(
        engine=engine,
        checkpoints=f"ck-{name}",
        landing=landing,
        prefix=prefix,
        transform=transform,
    )
    return pdir.write_config(body, f"{name}.toml")


def test_a_second_job_writing_the_same_output_directory_is_refused_at_start(
    pdir: PipelineDir,
) -> None:
    pdir.add_files(3, 30)
    first = job(pdir, "first", landing="landing")
    assert cli("run", str(first), "--available-now").returncode == 0
    published = sorted(p.name for p in pdir.out.iterdir())
    owner = json.loads((pdir.out / "_hdfs_sink" / "owner.json").read_text())
    assert owner["checkpoint"].endswith("/ck-first") and owner["id"]
    # Another job, other input, other file names, same directory: both engines refuse it
    # before writing anything (the Spark engine before its JVM starts).
    (pdir.root / "other").mkdir()
    (pdir.root / "other" / "x.txt").write_text("x1\nx2\n")
    for engine in ("local", "spark"):
        second = job(pdir, f"second-{engine}", landing="other", engine=engine, prefix="b")
        refused = cli("run", str(second), "--available-now")
        assert refused.returncode == 2, refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert "is written by another job" in last
        assert f"/ck-first (id {owner['id']})" in last and f"/ck-second-{engine}" in last
        assert "give this job its own output directory" in last
        assert sorted(p.name for p in pdir.out.iterdir()) == published
        # Nothing stamped either: pointed at its own output directory, it runs.
        assert not (pdir.root / f"ck-second-{engine}" / "pipeline.json").exists()
    own = job(pdir, "second-local", landing="other", prefix="b").read_text()
    own = pdir.write_config(own.replace('"out/b-', '"own/b-'), "second-local.toml")
    assert cli("run", str(own), "--available-now").returncode == 0
    assert pdir.output_lines(pdir.root / "own") == ["x1", "x2"]
    # The first job goes on as before.
    pdir.add_files(1, 30, prefix="g")
    again = cli("run", str(first), "--available-now")
    assert again.returncode == 0, again.stderr
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_a_job_started_over_from_deleted_checkpoints_is_refused_until_told(
    pdir: PipelineDir,
) -> None:
    pdir.add_files(2, 30)
    config = job(pdir, "job", landing="landing")
    assert cli("run", str(config), "--available-now").returncode == 0
    before = {p.name: p.read_bytes() for p in pdir.out.iterdir() if p.is_file()}
    shutil.rmtree(pdir.root / "ck-job")
    refused = cli("run", str(config), "--available-now")
    assert refused.returncode == 2, refused.stderr
    assert "checkpoints were deleted to start over), remove file://" in refused.stderr
    # Told so (the sink's folder removed), it reads everything again into new files; the
    # files published before stay as they were.
    shutil.rmtree(pdir.out / "_hdfs_sink")
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert all((pdir.out / name).read_bytes() == data for name, data in before.items())
    assert sorted(pdir.output_lines()) == sorted(pdir.records * 2)


def test_a_second_job_started_while_the_first_runs_is_refused(pdir: PipelineDir) -> None:
    # The first one's in-progress files would have been deleted as orphans by the second's
    # start, and their records lost when its next cut could not publish them.
    pdir.add_files(4, 30)
    # Paced by its transform (upper-cases), so that it is still running.
    pace = '[transform]\n    function = "pace:shout"'
    first = job(pdir, "first", landing="landing", transform=pace)
    running = start_cli("run", str(first), PACE="0.01")
    try:
        wait_for(
            lambda: any(p.name.endswith(".inprogress") for p in pdir.out.glob(".*")),
            what="an in-progress file",
            alive=running,
        )
        (pdir.root / "other").mkdir()
        (pdir.root / "other" / "x.txt").write_text("x1\n")
        second = job(pdir, "second", landing="other", prefix="b")
        refused = cli("run", str(second), "--available-now")
        assert refused.returncode == 2, refused.stderr
        wait_for(lambda: len(pdir.output_lines()) == 120, what="every record", alive=running)
    finally:
        running.terminate()
        running.communicate(timeout=60)
    assert sorted(pdir.output_lines()) == sorted(r.upper() for r in pdir.records)


def test_the_same_job_goes_on_after_its_checkpoint_directory_moved(pdir: PipelineDir) -> None:
    # The owner is the checkpoints' id, not where they are: moved with them, it goes on.
    pdir.add_files(2, 30)
    before = job(pdir, "job", landing="landing")
    assert cli("run", str(before), "--available-now").returncode == 0
    (pdir.root / "ck-job").rename(pdir.root / "ck-moved")
    moved = pdir.write_config(before.read_text().replace('"ck-job"', '"ck-moved"'), "job.toml")
    pdir.add_files(1, 30, prefix="g")
    done = cli("run", str(moved), "--available-now")
    assert done.returncode == 0, done.stderr
    assert sorted(pdir.output_lines()) == sorted(pdir.records)
