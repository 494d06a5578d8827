"""The published-files stream from a settings file: ``[sink] manifest`` and
``[sink] on_published``, on both engines, across a SIGKILL and a restart."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from operators.fs.local import LocalFileSystem
from operators.sink.manifest import manifest_dir, read_manifests
from tests.cli.conftest import PipelineDir, cli, start_cli, wait_for

HOOK = """\
import os


def record(path, size):
    with open(os.environ["ANNOUNCED"], "a") as log:
        log.write(f"{path} {size}\\n")
"""

SETTINGS = """\
    engine = "{engine}"
    [region]
    period = "200ms"
    [scan]
    directory = "landing"
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 40
    manifest = true
    on_published = "hooks:record"
"""


def published_files(out: Path) -> dict[str, int]:
    if not out.exists():
        return {}
    return {
        str(p): p.stat().st_size
        for p in out.iterdir()
        if p.is_file() and not p.name.startswith((".", "_"))
    }


def run_killed_then_finished(pdir: PipelineDir, engine: str, announced: Path) -> None:
    config = pdir.write_config(SETTINGS.format(engine=engine))
    (pdir.root / "hooks.py").write_text(HOOK, encoding="utf-8")
    env = {"ANNOUNCED": str(announced), "PACE": "0.01"}
    running = start_cli("run", str(config), **env)
    try:
        wait_for(lambda: len(published_files(pdir.out)) >= 2, what="files", alive=running)
        os.kill(running.pid, signal.SIGKILL)
        running.wait(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    pdir.add_files(2, 30, prefix="g")
    done = cli(
        "run",
        str(config),
        "--available-now",
        "--no-progress",
        PACE="0",
        **{"ANNOUNCED": str(announced)},
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_every_published_file_is_in_the_manifest_once_and_announced(
    pdir: PipelineDir, engine: str, tmp_path: Path
) -> None:
    pdir.add_files(6, 50)
    announced = tmp_path / "announced.txt"
    run_killed_then_finished(pdir, engine, announced)
    files = published_files(pdir.out)
    assert sorted(line.upper() for line in pdir.records) == sorted(pdir.output_lines())
    manifests = read_manifests(LocalFileSystem(), manifest_dir(str(pdir.out)))
    listed = Counter((f.path, f.size) for _, fs in manifests for f in fs)
    # Exactly once each, with its size, and nothing that was not published.
    assert listed == Counter(files.items())
    # The callback: every file, at least once; more than once only for the files of the one
    # cut whose announcement the kill may have interrupted.
    told = Counter(tuple(line.rsplit(" ", 1)) for line in announced.read_text().splitlines())
    assert {(p, str(s)) for p, s in files.items()} == set(told)
    assert sum(n - 1 for n in told.values()) <= 40
