"""The driver JVM's class-data archive: written by a first JVM at its exit, promoted by the next
run, then mapped by every JVM after (a real ``java``); never in the way of a user's own class
data settings, and never kept half written."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from operators.spark.classdata import JAVA_OPTIONS_KEY, archive_options
from operators.spark.session import find_java

MAGIC = bytes.fromhex("a8ab0bf0")


def java_with(options: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_java(), *shlex.split(options), *extra, "-version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_a_first_jvm_writes_the_archive_and_the_next_ones_map_it(tmp_path: Path) -> None:
    java = find_java()
    first = archive_options(java, {}, tmp_path)
    assert first.startswith(f"-XX:ArchiveClassesAtExit={tmp_path}/.") and "-Xlog:cds*=off" in first
    java_with(first)  # the JVM writes the archive as it exits
    assert list(tmp_path.glob("*.jsa")) == []  # not yet promoted: the next run does that
    second = archive_options(java, {}, tmp_path)
    (archive,) = tmp_path.glob("*.jsa")
    assert second == f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    assert list(tmp_path.glob(".*.tmp")) == []
    log = tmp_path / "classes.txt"
    done = java_with(second, f"-Xlog:class+load:file={log}")
    assert "cds" not in done.stderr.lower()  # nothing said about class data
    assert "shared objects file (top)" in log.read_text()  # classes from the archive
    # The same options again: the same archive.
    assert archive_options(java, {}, tmp_path) == second


def test_an_archive_the_jvm_cannot_use_only_costs_time(tmp_path: Path) -> None:
    java = find_java()
    options = archive_options(java, {}, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written before a JVM runs
    writing = Path(options.split("=", 1)[1].split()[0])
    writing.write_bytes(MAGIC + b"\0" * 64)  # a header, and nothing the JVM can map
    used = archive_options(java, {}, tmp_path)
    assert used.startswith("-XX:SharedArchiveFile=")
    done = java_with(used)
    assert done.returncode == 0 and "cds" not in done.stderr.lower()


def test_unfinished_and_concurrent_archives(tmp_path: Path) -> None:
    java = find_java()
    options = archive_options(java, {}, tmp_path)
    name = Path(options.split("=", 1)[1].split()[0]).name[1:].rsplit(".", 2)[0]
    # Two JVMs that wrote one each, one still writing (its header comes last), one abandoned.
    for n in ("a", "b"):
        (tmp_path / f".{name}.{n}.tmp").write_bytes(MAGIC + b"archive")
    writing = tmp_path / f".{name}.c.tmp"
    writing.write_bytes(b"\0" * 16)
    abandoned = tmp_path / f".{name}.d.tmp"
    abandoned.write_bytes(b"\0" * 16)
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(abandoned, (day_ago, day_ago))
    used = archive_options(java, {}, tmp_path)
    assert used.startswith(f"-XX:SharedArchiveFile={tmp_path / name} ")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, writing.name])


def test_other_setups_get_other_archives_and_old_ones_are_pruned(tmp_path: Path) -> None:
    java = find_java()

    def archive_for(settings: dict[str, str]) -> Path:
        options = archive_options(java, settings, tmp_path)
        writing = Path(options.split("=", 1)[1].split()[0])
        writing.write_bytes(MAGIC)
        return Path(archive_options(java, settings, tmp_path).split("=", 1)[1].split()[0])

    plain = archive_for({})
    other = archive_for({"spark.jars": "/opt/extra.jar"})
    assert plain != other and plain.exists() and other.exists()
    third = archive_for({"spark.driver.extraClassPath": "/opt/x"})
    # Two kept: the one in use and the most recently used other.
    assert sorted(p.name for p in tmp_path.glob("*.jsa")) == sorted([other.name, third.name])


@pytest.mark.parametrize(
    "given", ["-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/x"]
)
def test_a_users_own_class_data_settings_are_left_alone(tmp_path: Path, given: str) -> None:
    assert archive_options(find_java(), {JAVA_OPTIONS_KEY: given}, tmp_path) == ""
    assert list(tmp_path.iterdir()) == []


def test_a_cache_that_cannot_be_written_gives_no_options(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    assert archive_options(find_java(), {}, blocked / "class-data") == ""


def test_a_session_that_only_maps_writes_nothing(tmp_path: Path) -> None:
    assert archive_options(find_java(), {}, tmp_path, write=False) == ""
    assert list(tmp_path.iterdir()) == []
