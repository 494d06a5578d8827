"""``hdfs-region`` on the Spark engine (local mode). Each process starts a JVM (~15 s), so this
is one run and one crash/restart (the demo); the Spark operators are tested in tests/spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli

pytestmark = pytest.mark.spark

SETTINGS = """\
    engine = "spark"
    [region]
    period = "200ms"
    [scan]
    directory = "landing"
    [transform]
    sql = "SELECT upper(value) AS value FROM input WHERE value NOT LIKE 'drop%'"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 40
    [spark]
    max_files_per_trigger = 2
"""


def test_spark_run_available_now_then_inspect(pdir: PipelineDir) -> None:
    pdir.add_files(4, 30)
    pdir.add_file("z.txt", ["drop this", "keep this"])
    config = pdir.write_config(SETTINGS)
    done = cli("run", str(config), "--available-now", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sorted(r.upper() for r in pdir.records if not r.startswith("drop"))
    got = pdir.output_lines()
    assert sorted(got) == expected and len(got) == 121
    assert not [p for p in pdir.out.iterdir() if p.name.startswith(".")]
    # Batches of at most two files: three cuts; progress lines and the summary.
    assert "stopped: 122 records in, 3 cuts, 0 resets" in done.stdout
    assert "operators.app.progress" in done.stderr

    checkpoints = pdir.root / "checkpoints" / "pipeline"
    shown = cli("inspect", str(checkpoints))
    assert shown.returncode == 0, shown.stderr
    assert "(spark engine)" in shown.stdout
    assert "3 batch(es)" in shown.stdout and "newest committed batch 2" in shown.stdout
    assert '"name": "z.txt"' in shown.stdout  # the scan's position
    # Files span batches: 121 records make files of 40, 40, 40 and the 1 the stop published.
    assert '"next_filenum": 4' in shown.stdout
    assert [len(f.read_text().splitlines()) for f in sorted(pdir.out.glob("part-*"))] == [
        40,
        40,
        40,
        1,
    ]

    # The checkpoints of one engine cannot be resumed by the other (no JVM needed to refuse).
    local = pdir.write_config(
        """\
        engine = "local"
        [region]
        checkpoint_dir = "checkpoints/pipeline"
        [scan]
        directory = "landing"
        [sink]
        file = "out/part-%FILENUM.txt"
        """,
        "local.toml",
    )
    other = cli("run", str(local), "--available-now")
    assert other.returncode == 1
    assert "holds checkpoints of the spark engine" in other.stderr


def test_spark_demo_crashes_and_restarts_exactly_once(tmp_path: Path) -> None:
    done = cli(
        "demo",
        str(tmp_path / "demo"),
        "--engine",
        "spark",
        "--files",
        "4",
        "--lines",
        "100",
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = done.stdout
    assert "killed it with SIGKILL mid-run" in report
    assert "records in         400" in report and "records out        400" in report
    assert "duplicates           0" in report and "missing              0" in report
    assert "exactly once: YES" in report


def test_spark_reads_one_named_file(pdir: PipelineDir) -> None:
    pdir.add_files(2, 5)  # not read: only the named file is
    pdir.add_file("orders.csv", [f"order-{i}" for i in range(50)])
    config = pdir.write_config(
        """\
        engine = "spark"
        [source]
        file = "landing/orders.csv"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), timeout=300)  # ends once the file is read
    assert done.returncode == 0, done.stderr[-3000:]
    assert pdir.output_lines() == [f"order-{i}" for i in range(50)]
    refused = cli("switch", str(config), str(pdir.landing))
    assert refused.returncode == 2 and "no directory to switch" in refused.stderr


NAMED = """\
    engine = "spark"
    [scan]
    directory = "landing"
    [transform]
    function = "names:route"
    [sink]
    directory = "out"
    file_attribute_name = "name"
    manifest = true
    [spark]
    max_files_per_trigger = 1
"""

ROUTE = """\
def route(record):
    return (record.split("-")[0] + ".csv", record)
"""


def test_spark_writes_the_files_records_name_and_a_returning_name_rolls(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("one.txt", ["a-1", "b-1", "a-2"])
    pdir.add_file("two.txt", ["a-3", "c-1"])  # a.csv returns in the next batch
    config = pdir.write_config(NAMED)
    (pdir.root / "names.py").write_text(ROUTE, encoding="utf-8")
    done = cli("run", str(config), "--available-now", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = {p.name: p.read_text().splitlines() for p in pdir.out.iterdir() if p.is_file()}
    assert files == {
        "a.csv": ["a-1", "a-2"],
        "b.csv": ["b-1"],
        "a-1.csv": ["a-3"],
        "c.csv": ["c-1"],
    }


def test_spark_reads_compressed_lines_decompressed_run_after_run(pdir: PipelineDir) -> None:
    """gzip'd and zstd lines beside plain ones, no transform (plain lines are copied as bytes,
    compressed ones never): every line once, in a gzip'd output, run again from cron."""
    import gzip

    import pyarrow as pa

    def zstd(data: bytes) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, "zstd") as out:
            out.write(data)
        return sink.getvalue().to_pybytes()

    pdir.add_file("plain.txt", [f"plain-{i}" for i in range(100)])
    pdir.landing.mkdir(parents=True, exist_ok=True)
    text = "".join(f"gz-{i}\n" for i in range(3000)).encode()
    (pdir.landing / "a.txt.gz").write_bytes(gzip.compress(text[:9000]) + gzip.compress(text[9000:]))
    (pdir.landing / "b.txt.zst").write_bytes(
        zstd("".join(f"zst-{i}\n" for i in range(500)).encode())
    )
    config = pdir.write_config(
        """\
        engine = "spark"
        [scan]
        directory = "landing"
        [sink]
        file = "out/part-%FILENUM.txt.gz"
        compression = "gzip"
        """
    )
    done = cli("run", str(config), "--available-now", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (pdir.landing / "c.txt.gz").write_bytes(gzip.compress(b"late-1\nlate-2"))
    again = cli("run", str(config), "--available-now", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    got = [
        line
        for f in sorted(pdir.out.glob("part-*"))
        for line in gzip.decompress(f.read_bytes()).decode().splitlines()
    ]
    expected = (
        [f"plain-{i}" for i in range(100)]
        + [f"gz-{i}" for i in range(3000)]
        + [f"zst-{i}" for i in range(500)]
        + ["late-1", "late-2"]
    )
    assert sorted(got) == sorted(expected)
