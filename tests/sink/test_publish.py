"""Publish by rename, repeatable: the rule both sinks use (operators.sink.publish)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.fs.local import LocalFileSystem
from operators.sink.publish import publish

FS = LocalFileSystem()


def plan(directory: Path, n: int) -> list[tuple[str, str]]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        work = directory / f".part-{i}.inprogress"
        work.write_text(f"file {i}\n")
        out.append((str(work), str(directory / f"part-{i}.txt")))
    return out


def run_renames(renames: list[tuple[str, str]], *, recovering: bool = False) -> list[bool]:
    """A sink running its plan: each rename by the publish rule, in order."""
    return [publish(FS, src, dst, who="sink 's'", recovering=recovering) for src, dst in renames]


def published(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 6), crash_after=st.integers(0, 6), runs=st.integers(1, 3))
def test_a_plan_run_again_after_a_crash_anywhere_publishes_each_file_once(
    tmp_path_factory: pytest.TempPathFactory, n: int, crash_after: int, runs: int
) -> None:
    directory = tmp_path_factory.mktemp("pub")
    renames = plan(directory, n)
    done = run_renames(renames[:crash_after])  # the process dies here
    assert all(done)
    for _ in range(runs):  # recovery runs the whole plan, maybe more than once
        again = run_renames(renames, recovering=True)
        assert again == [i >= crash_after for i in range(n)]
        crash_after = n
    assert published(directory) == {f"part-{i}.txt": f"file {i}\n" for i in range(n)}


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (work, final), *_ = plan(tmp_path, 1)
    Path(final).write_text("someone else's\n")
    with pytest.raises(FileExistsError, match=r"part-0.txt exists and is never overwritten"):
        run_renames([(work, final)])
    assert Path(final).read_text() == "someone else's\n" and Path(work).exists()


def test_a_missing_in_progress_file_fails_live_and_warns_when_recovering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (work, final), *_ = plan(tmp_path, 1)
    Path(work).unlink()
    with pytest.raises(FileNotFoundError, match=r"sink 's': cannot publish .*part-0.txt: neither"):
        run_renames([(work, final)])
    with caplog.at_level(logging.WARNING, logger="operators.sink.publish"):
        assert run_renames([(work, final)], recovering=True) == [False]
    assert "moved away since?" in caplog.text
