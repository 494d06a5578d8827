"""The driver JVM's class-data archive: built in the background by a real Spark job whose JVM
writes it at exit, promoted into place, then mapped by the next JVMs (a real ``java``); never
in the way of a user's own class data settings, and never used half written."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operators.spark import classdata
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


def name_of(folder: Path) -> str:
    return classdata._archive_name(find_java(), {})


@pytest.fixture
def no_builder(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The builders that would have started (their commands), none started."""
    started: list[list[str]] = []

    def spawn(command: list[str]) -> int:
        started.append(command)
        return 1

    monkeypatch.setattr(classdata, "_spawn", spawn)
    return started


def test_a_finished_archive_is_promoted_and_mapped_without_a_word(
    tmp_path: Path, no_builder: list[list[str]]
) -> None:
    java = find_java()
    name = name_of(tmp_path)
    # A JVM writes an archive at its exit under a name of its own (as the builder's does).
    java_with(f"-XX:ArchiveClassesAtExit={tmp_path}/.{name}.x1.tmp -Xlog:cds*=off")
    options = archive_options(java, {}, tmp_path)
    assert options == f"-XX:SharedArchiveFile={tmp_path / name} -Xlog:cds*=off"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    log = tmp_path / "classes.txt"
    done = java_with(options, f"-Xlog:class+load:file={log}")
    assert "cds" not in done.stderr.lower()  # nothing said about class data
    assert "shared objects file (top)" in log.read_text()  # classes from the archive
    assert no_builder == []


def test_without_an_archive_one_builder_starts_in_the_background(
    tmp_path: Path, no_builder: list[list[str]]
) -> None:
    java = find_java()
    assert archive_options(java, {"spark.jars": "/opt/x.jar"}, tmp_path) == ""
    assert archive_options(java, {"spark.jars": "/opt/x.jar"}, tmp_path) == ""  # one at work
    (command,) = no_builder
    assert command[:3] == [sys.executable, "-m", "operators.spark.classdata"]
    assert command[3] == str(tmp_path) and '"spark.jars": "/opt/x.jar"' in command[5]
    # A builder that died: its lock is old, and the next run starts another.
    (lock,) = tmp_path.glob(".*.building")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    archive_options(java, {"spark.jars": "/opt/x.jar"}, tmp_path)
    assert len(no_builder) == 2
    # A long-lived session maps an archive but starts no builder.
    assert archive_options(java, {}, tmp_path, write=False) == "" and len(no_builder) == 2


def test_a_builder_that_failed_is_not_started_again_by_every_run(
    tmp_path: Path, no_builder: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = name_of(tmp_path)

    def no_jvm(*args: object, **kwargs: object) -> None:
        raise subprocess.CalledProcessError(1, "java")

    monkeypatch.setattr(classdata.subprocess, "run", no_jvm)
    with pytest.raises(subprocess.CalledProcessError):
        classdata.build(tmp_path, name, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{name}.failed"]
    assert archive_options(find_java(), {}, tmp_path) == "" and no_builder == []
    # A day later it is tried again.
    old = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / f".{name}.failed", (old, old))
    archive_options(find_java(), {}, tmp_path)
    assert len(no_builder) == 1


def test_an_archive_the_jvm_cannot_use_only_costs_time(
    tmp_path: Path, no_builder: list[list[str]]
) -> None:
    name = name_of(tmp_path)
    (tmp_path / f".{name}.x.tmp").write_bytes(MAGIC + b"\0" * 64)  # nothing the JVM can map
    used = archive_options(find_java(), {}, tmp_path)
    assert used.startswith("-XX:SharedArchiveFile=")
    done = java_with(used)
    assert done.returncode == 0 and "cds" not in done.stderr.lower()


def test_unfinished_and_concurrent_archives(tmp_path: Path, no_builder: list[list[str]]) -> None:
    name = name_of(tmp_path)
    # Two JVMs that wrote one each, one still writing (its header comes last), one abandoned.
    for n in ("a", "b"):
        (tmp_path / f".{name}.{n}.tmp").write_bytes(MAGIC + b"archive")
    writing = tmp_path / f".{name}.c.tmp"
    writing.write_bytes(b"\0" * 16)
    abandoned = tmp_path / f".{name}.d.tmp"
    abandoned.write_bytes(b"\0" * 16)
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(abandoned, (day_ago, day_ago))
    used = archive_options(find_java(), {}, tmp_path)
    assert used.startswith(f"-XX:SharedArchiveFile={tmp_path / name} ")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, writing.name])


def test_other_setups_get_other_archives_and_old_ones_are_pruned(
    tmp_path: Path, no_builder: list[list[str]]
) -> None:
    java = find_java()

    def archive_for(settings: dict[str, str]) -> Path:
        name = classdata._archive_name(java, settings)
        (tmp_path / f".{name}.x.tmp").write_bytes(MAGIC)
        archive_options(java, settings, tmp_path)
        return tmp_path / name

    plain = archive_for({})
    other = archive_for({"spark.jars": "/opt/extra.jar"})
    assert plain != other and plain.exists() and other.exists()
    third = archive_for({"spark.driver.extraClassPath": "/opt/x"})
    # Two kept: the one in use and the most recently used other.
    assert sorted(p.name for p in tmp_path.glob("*.jsa")) == sorted([other.name, third.name])


@pytest.mark.parametrize(
    "given", ["-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/x"]
)
def test_a_users_own_class_data_settings_are_left_alone(
    tmp_path: Path, given: str, no_builder: list[list[str]]
) -> None:
    assert archive_options(find_java(), {JAVA_OPTIONS_KEY: given}, tmp_path) == ""
    assert list(tmp_path.iterdir()) == [] and no_builder == []


def test_a_cache_that_cannot_be_written_gives_no_options(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    assert archive_options(find_java(), {}, blocked / "class-data") == ""


MAPPED = """
import sys
from operators.spark.session import build_session
conf = {"spark.driver.extraJavaOptions": sys.argv[1]}
spark = build_session("mapped", conf=conf, data_sources=False, class_data=False)
spark.range(0, 4, 1, 2).mapInArrow(lambda b: b, "id long").collect()
spark.stop()
"""


@pytest.mark.integration
def test_the_builder_makes_an_archive_a_spark_driver_maps(tmp_path: Path) -> None:
    java = find_java()
    name = name_of(tmp_path)
    (tmp_path / f".{name}.building").touch()  # as _start_builder leaves it
    assert classdata.build(tmp_path, name, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # lock gone, nothing half done
    options = archive_options(java, {}, tmp_path)
    log = tmp_path / "classes.txt"
    subprocess.run(
        [sys.executable, "-c", MAPPED, f"{options} -Xlog:class+load:file={log}"],
        check=True,
        timeout=600,
        capture_output=True,
    )
    loaded = log.read_text().splitlines()
    shared = [line for line in loaded if "shared objects file (top)" in line]
    # Most of Spark's classes come from the archive, not from the jars.
    assert any("org.apache.spark.SparkContext " in line for line in shared)
    assert len(shared) > len(loaded) // 2
