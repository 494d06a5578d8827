"""The Flink benchmark's output check on the layout Flink's FileSink writes: part files in
bucket folders, an in-progress part file hidden beside them. No pyflink is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_flink import Runner, check, count_output
from bench.bench_spark_engine import Place
from operators.fs import open_path

BUCKET = "2026-11-30--07"


def flink_layout(out: Path, *, in_progress: bool) -> None:
    (out / BUCKET).mkdir(parents=True)
    (out / BUCKET / "part-3f1c-0-0").write_bytes(b"a\nbb\n")
    (out / "2026-11-30--08").mkdir()
    (out / "2026-11-30--08" / "part-3f1c-1-0").write_bytes(b"ccc\n")
    if in_progress:
        (out / BUCKET / ".part-3f1c-0-1.inprogress.9d2e").write_bytes(b"dddd\n")


def test_counts_the_part_files_of_every_bucket_and_lists_the_hidden_ones(tmp_path: Path) -> None:
    flink_layout(tmp_path / "out", in_progress=True)
    (tmp_path / "out" / "_spark_metadata").mkdir()
    (tmp_path / "out" / "_spark_metadata" / "0").write_bytes(b"v1\n")
    fs, root = open_path(str(tmp_path))

    out = count_output(fs, f"{root}/out")

    assert (out.files, out.lines, out.bytes) == (2, 3, 9)
    assert out.hidden == (f"{BUCKET}/.part-3f1c-0-1.inprogress.9d2e", "_spark_metadata/0")
    assert out.unfinished() == [f"{BUCKET}/.part-3f1c-0-1.inprogress.9d2e"]


def runner(tmp_path: Path) -> Runner:
    return Runner(Place(str(tmp_path / "input"), str(tmp_path)), tmp_path, None, None)


def test_a_flink_run_with_an_uncommitted_part_file_fails_the_check(tmp_path: Path) -> None:
    flink_layout(tmp_path / "out-flink-p2-0", in_progress=True)

    with pytest.raises(
        RuntimeError, match=r"flink-p2-0: part files left uncommitted: .*\.inprogress"
    ):
        check(runner(tmp_path), 3, 9, "flink-p2", "0")


def test_a_complete_output_passes_and_is_removed_a_short_one_fails(tmp_path: Path) -> None:
    flink_layout(tmp_path / "out-flink-p2-0", in_progress=False)
    check(runner(tmp_path), 3, 9, "flink-p2", "0")
    assert not (tmp_path / "out-flink-p2-0").exists()

    flink_layout(tmp_path / "out-local-1", in_progress=False)
    with pytest.raises(RuntimeError, match=r"local-1: 3 lines, 9 bytes of 4, 14"):
        check(runner(tmp_path), 4, 14, "local", "1")
