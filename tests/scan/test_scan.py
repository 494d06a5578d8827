from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.scan.cursor import _SEGMENT, describe_state
from operators.testing import ManualClock
from region.state import State
from tests.landing import Landing

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S  # mtimes of test files, well before the fake clock's "now"


def make_scan(landing: Landing, clock: ManualClock, **settings: object) -> HDFS2DirectoryScan:
    values: dict[str, object] = {"directory": landing.dir, "sleep_time": 5}
    values.update(settings)
    scan = HDFS2DirectoryScan(ScanSettings.model_validate(values), landing.fs, clock=clock)
    scan.reset_to_initial_state()
    return scan


def names(scan: HDFS2DirectoryScan) -> list[str]:
    """Every file the scan emits now (without waiting for another listing)."""
    out = []
    while (status := scan.next_file()) is not None:
        out.append(status.name)
    return out


# -- settings ---------------------------------------------------------------------------------


def test_ibm_names_are_aliases_and_defaults_match_ibm() -> None:
    s = ScanSettings.model_validate(
        {"directory": "/in", "sleepTime": "250ms", "initDelay": 2, "strictMode": True}
    )
    assert (s.sleep_time, s.init_delay, s.strict_mode) == (0.25, 2.0, True)
    d = ScanSettings(directory="/in")
    assert (d.sleep_time, d.init_delay, d.strict_mode) == (5.0, 0.0, False)
    assert (d.min_file_age, d.late_window, d.on_late_file, d.roots) == (0.0, 600.0, "warn", None)


def test_bad_pattern_error_names_the_pattern() -> None:
    with pytest.raises(ValidationError, match=r"pattern '\(\*unclosed' is not a valid"):
        ScanSettings(directory="/in", pattern="(*unclosed")


def test_unknown_field_and_directory_outside_roots_are_config_errors() -> None:
    with pytest.raises(ValidationError, match="sleep_tme"):
        ScanSettings.model_validate({"directory": "/in", "sleep_tme": 1})
    with pytest.raises(ValidationError, match=r"'/data/\.\./etc' is outside the allowed roots"):
        ScanSettings(directory="/data/../etc", roots=("/data",))


# -- order and listing ------------------------------------------------------------------------


def test_emits_full_paths_in_mtime_then_name_order_once(
    any_landing: Landing, clock: ManualClock
) -> None:
    for name, ts in [("E", 1), ("A", 3), ("C", 2), ("H", 6), ("G", 6), ("F", 6), ("B", 4)]:
        any_landing.put(name, name, T0 + ts * S)
    scan = make_scan(any_landing, clock)
    batch = scan.next_batch(4)
    assert batch is not None and batch.punctuation
    assert batch.records == [any_landing.path(n) for n in ["E", "C", "A", "B"]]
    assert names(scan) == ["F", "G", "H"]
    clock.advance(60)
    assert scan.next_batch(10) is None  # listed again: nothing new, nothing twice
    assert scan.metrics()["files_emitted"] == 7


def test_pattern_is_a_full_match_on_the_base_name(landing: Landing, clock: ManualClock) -> None:
    for n in ["a.csv", "a.csv.bak", "xa.csvx", "b.csv"]:
        landing.put(n, n, T0)
    assert names(make_scan(landing, clock, pattern=r".*\.csv")) == ["a.csv", "b.csv"]


def test_relists_only_after_sleep_time_and_skips_nothing_across_listings(
    landing: Landing, clock: ManualClock
) -> None:
    landing.put("a", "a", T0 + 1 * S)
    scan = make_scan(landing, clock, sleep_time=10)
    assert names(scan) == ["a"]
    landing.put("b", "b", T0 + 2 * S)
    clock.advance(9)
    assert scan.next_file() is None  # the listing of 9 s ago is exhausted; not time yet
    assert scan.poll_interval() == pytest.approx(1.0)
    clock.advance(1)
    assert names(scan) == ["b"]
    assert scan.metrics()["listings"] == 2


def test_init_delay_holds_the_first_listing(landing: Landing, clock: ManualClock) -> None:
    landing.put("a", "a", T0)
    scan = make_scan(landing, clock, init_delay=3)
    assert scan.next_batch(5) is None
    clock.advance(3)
    assert names(scan) == ["a"]


def test_missing_directory_is_a_warning_unless_strict(
    any_landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    missing = any_landing.root + "/later"
    lenient = make_scan(any_landing, clock, directory=missing)
    with caplog.at_level(logging.WARNING, logger="operators.scan.operator"):
        assert lenient.next_batch(5) is None
    assert "later does not exist" in caplog.text
    any_landing.fs.mkdirs(missing)
    any_landing.fs.create(missing + "/x").close()
    clock.advance(5)
    assert names(lenient) == ["x"]

    strict = make_scan(any_landing, clock, directory=any_landing.root + "/nope", strict_mode=True)
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        strict.next_batch(5)


# -- state ------------------------------------------------------------------------------------


def test_weakness9_checkpoint_before_anything_is_a_valid_state(
    landing: Landing, clock: ManualClock
) -> None:
    """Weakness 9: a cut before the first file must not crash and must replay everything."""
    scan = HDFS2DirectoryScan(ScanSettings(directory=landing.dir), landing.fs, clock=clock)
    scan.drain()
    state = scan.checkpoint(1)
    assert (state["directory"], state["key"], state["window"], state["passed_over"]) == (
        landing.dir,
        None,
        [],
        0,
    )
    landing.put("a", "a", T0)
    fresh = HDFS2DirectoryScan(ScanSettings(directory=landing.dir), landing.fs, clock=clock)
    fresh.reset(json.loads(json.dumps(state)))
    assert names(fresh) == ["a"]


def test_snapshot_rebuild_resume_at_every_cut_point(
    any_landing: Landing, clock: ManualClock
) -> None:
    # Ties everywhere: 5 mtimes for 14 files, names out of creation order.
    files = [(f"f{(5 * i) % 14:02d}", T0 + (i % 5) * S) for i in range(14)]
    for name, mtime in files:
        any_landing.put(name, name, mtime)
    expected = [n for n, _ in sorted(files, key=lambda f: (f[1], f[0]))]
    for cut in range(len(expected) + 1):
        first = make_scan(any_landing, clock)
        before = [first.next_file() for _ in range(cut)]
        state = json.loads(json.dumps(first.checkpoint(cut)))
        rebuilt = HDFS2DirectoryScan(
            ScanSettings(directory=any_landing.dir), any_landing.fs, clock=clock
        )
        rebuilt.reset(state)
        assert [s.name for s in before if s] + names(rebuilt) == expected, f"cut after {cut}"


def test_weakness8_reset_drops_the_in_memory_listing_and_replays_from_the_cut(
    landing: Landing, clock: ManualClock
) -> None:
    """Weakness 8: a file handed out after the cut (still in flight at the crash) comes back once
    from the replay, and nothing left over from the old listing is emitted on top of it."""
    for i, n in enumerate("abcde"):
        landing.put(n, n, T0 + i * S)
    scan = make_scan(landing, clock)
    assert names_n(scan, 2) == ["a", "b"]
    cut = scan.checkpoint(1)
    assert names_n(scan, 2) == ["c", "d"]  # "d" is in flight when the region resets
    scan.reset(cut)
    assert names(scan) == ["c", "d", "e"]
    clock.advance(60)
    assert names(scan) == []
    scan.reset_to_initial_state()
    assert names(scan) == list("abcde")


def names_n(scan: HDFS2DirectoryScan, n: int) -> list[str]:
    out = [scan.next_file() for _ in range(n)]
    return [s.name for s in out if s is not None]


def test_strict_state_stays_small(landing: Landing, clock: ManualClock) -> None:
    """late_window = 0 keeps no names: the census holds them all in a few kilobytes."""
    for i in range(300):
        landing.put(f"file-{i:04d}", "x", T0 + (i // 100) * S)  # groups of 100 equal mtimes
    scan = make_scan(landing, clock, late_window=0)
    assert len(names(scan)) == 300
    state = scan.checkpoint(1)
    assert describe_state(state)["names_in_window"] == 0
    assert describe_state(state)["names_below_window"] == 300
    assert len(json.dumps(state)) < 12 * 1024


# -- weaknesses of the original ---------------------------------------------------------------


def test_weakness4_lone_file_with_the_checkpointed_mtime_is_not_skipped(
    any_landing: Landing, clock: ManualClock
) -> None:
    """IBM compares names only when two files share an mtime in the current listing: after "x"
    was processed and removed, a lone "y" with the same mtime was skipped."""
    any_landing.put("x", "x", T0)
    scan = make_scan(any_landing, clock)
    assert names(scan) == ["x"]
    state = scan.checkpoint(1)
    any_landing.remove("x")
    any_landing.put("y", "y", T0)
    clock.advance(5)
    assert names(scan) == ["y"]
    # The same after a restart from the checkpoint taken after "x".
    rebuilt = make_scan(any_landing, clock)
    rebuilt.reset(state)
    assert names(rebuilt) == ["y"]


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
def test_a_file_replaced_under_a_name_read_is_read_whole_one_appended_is_reported(
    any_landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture, restart: bool
) -> None:
    """``mv new.tmp daily.csv`` over a file read: another file (inode, HDFS fileId) is read
    whole, once, with ``on_modified = "warn"``; a file appended to in place keeps
    its identity and is reported, not read again."""
    land = any_landing
    land.put("daily.csv", "old\n", T0)
    land.put("log.txt", "a\n", T0 + S)
    scan = make_scan(land, clock, on_modified="warn")
    assert names(scan) == ["daily.csv", "log.txt"]
    state = scan.checkpoint(1)
    if restart:
        scan = make_scan(land, clock, on_modified="warn")
        scan.reset(state)
    land.put(".daily.csv.tmp", "new\n")
    land.fs.rename(land.path(".daily.csv.tmp"), land.path("daily.csv"), overwrite=True)
    land.set_mtime(land.path("daily.csv"), T0 + 30 * S)
    writer = land.fs.append(land.path("log.txt"))
    writer.write(b"b\n")
    writer.close()
    land.set_mtime(land.path("log.txt"), T0 + 31 * S)
    clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert names(scan) == ["daily.csv"]
        clock.advance(5)
        assert names(scan) == []
    assert "daily.csv" not in caplog.text
    assert caplog.text.count("log.txt changed after it was read") == 1
    assert scan.modified == 1
    rebuilt = make_scan(land, clock, on_modified="warn")
    rebuilt.reset(scan.checkpoint(2))
    assert names(rebuilt) == []  # read once, also across a restart


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
def test_a_file_renamed_over_one_read_with_its_very_mtime_is_read_whole_once(
    landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture, restart: bool
) -> None:
    """``touch -r daily.csv new.tmp; mv new.tmp daily.csv`` (or ``cp -p``): the name's mtime
    and size do not change, its inode does. The new file is read whole, once; the listing
    holds the inode, so telling it costs no request."""
    landing.put("daily.csv", "old\n", T0)
    landing.put("other.csv", "o\n", T0 + S)
    scan = make_scan(landing, clock)
    assert names(scan) == ["daily.csv", "other.csv"]
    if restart:
        state = scan.checkpoint(1)
        scan = make_scan(landing, clock)
        scan.reset(state)
    landing.put(".daily.csv.tmp", "new\n", T0)
    landing.fs.rename(landing.path(".daily.csv.tmp"), landing.path("daily.csv"), overwrite=True)
    clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert names(scan) == ["daily.csv"]
        clock.advance(5)
        assert names(scan) == []
    assert caplog.text == ""
    assert scan.modified == 0
    rebuilt = make_scan(landing, clock)
    rebuilt.reset(scan.checkpoint(2))
    assert names(rebuilt) == []  # read once, also across a restart


@pytest.mark.parametrize("late_window", ["600s", 0], ids=["in the window", "in the census"])
@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
def test_a_file_appended_to_after_it_was_read_is_known_while_too_young_to_be_listed(
    landing: Landing,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    restart: bool,
    late_window: object,
) -> None:
    """With ``min_file_age``, a file appended to after it was read is left out of the
    listings until old enough again, and still known meanwhile: then reported as changed
    (``on_modified = "warn"``), never read again whole as if it were new."""
    now_ns = round(clock.now * S)
    landing.put("daily.csv", "a\n", now_ns - 60 * S)
    scan = make_scan(
        landing, clock, min_file_age="10s", late_window=late_window, on_modified="warn"
    )
    assert names(scan) == ["daily.csv"]
    writer = landing.fs.append(landing.path("daily.csv"))
    writer.write(b"b\n")
    writer.close()
    landing.set_mtime(landing.path("daily.csv"), now_ns)
    clock.advance(5)
    assert names(scan) == []  # too young
    if restart:
        state = scan.checkpoint(1)
        scan = make_scan(
            landing, clock, min_file_age="10s", late_window=late_window, on_modified="warn"
        )
        scan.reset(state)
        assert names(scan) == []
        state = scan.checkpoint(2)  # restarted again while it is still too young
        scan = make_scan(
            landing, clock, min_file_age="10s", late_window=late_window, on_modified="warn"
        )
        scan.reset(state)
        assert names(scan) == []
    clock.advance(10)
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert names(scan) == []
        clock.advance(5)
        assert names(scan) == []
    assert caplog.text.count("daily.csv changed after it was read") == 1
    assert scan.modified == 1


def test_a_file_read_again_by_reread_after_a_restart_is_not_reported_passed_over_later(
    landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``on_modified = "reread"``, strict (``late_window = 0``): a file read, changed while
    the job was down, is read again whole once at the restart; the runs after it neither read
    it again nor report it as a late file passed over."""

    def restarted(state: State | None) -> HDFS2DirectoryScan:
        scan = make_scan(landing, clock, late_window=0, on_modified="reread")
        if state is not None:
            scan.reset(state)
        clock.advance(5)
        return scan

    landing.put("a", "1\n", T0)
    landing.put("b", "1\n", T0 + S)
    scan = restarted(None)
    assert names(scan) == ["a", "b"]
    writer = landing.fs.append(landing.path("a"))
    writer.write(b"2\n")
    writer.close()
    landing.set_mtime(landing.path("a"), T0 + 2 * S)
    scan = restarted(scan.checkpoint(1))
    assert names(scan) == ["a"]
    landing.put("c", "1\n", T0 + 3 * S)
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        scan = restarted(scan.checkpoint(2))
        assert names(scan) == ["c"]
        scan = restarted(scan.checkpoint(3))
        assert names(scan) == []
    assert caplog.text == ""
    assert scan.passed_over == 0


def test_weakness5_late_file_with_an_older_mtime_is_emitted_once(
    any_landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    any_landing.put("new", "n", T0 + 100 * S)
    scan = make_scan(any_landing, clock, late_window="60s")
    strict = make_scan(any_landing, clock, late_window=0)
    assert names(scan) == ["new"] and names(strict) == ["new"]
    # A copy that kept its mtime (50 s older) and one far older than the window.
    any_landing.put("copied", "c", T0 + 50 * S)
    any_landing.put("ancient", "a", T0 + 1 * S)
    clock.advance(5)
    assert names(scan) == ["ancient", "copied"]  # a name new since the last listing
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert names(strict) == []  # IBM's rule: files sorting before the key are passed over
    assert "ancient landed late (its mtime is 99.000s before" in caplog.text
    assert "copied landed late (its mtime is 50.000s before" in caplog.text
    assert strict.passed_over == 2 and strict.metrics()["files_passed_over"] == 2
    state = scan.checkpoint(1)
    described = describe_state(state)
    assert (described["names_in_window"], described["names_below_window"]) == (2, 1)
    clock.advance(5)
    assert names(scan) == []  # once only
    rebuilt = make_scan(any_landing, clock, late_window="60s")
    rebuilt.reset(json.loads(json.dumps(state)))
    assert names(rebuilt) == []  # once only, across a restart too
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        clock.advance(5)
        assert names(strict) == []
    assert caplog.text == ""  # passed over once, reported once


def test_weakness5_late_memory_is_bounded_by_the_window(
    landing: Landing, clock: ManualClock
) -> None:
    scan = make_scan(landing, clock, late_window=10)
    sizes = []
    for i in range(600):
        landing.put(f"f{i:03d}", "x", T0 + i * S)  # one file per second
        if i % 20 == 19:
            clock.advance(5)
            assert len(names(scan)) == 20
            sizes.append(describe_state(scan.checkpoint(i)))
    # Names within [key - 10 s, key], plus at most one segment just below, however many files
    # went by; the others are in the census.
    assert max(s["names_in_window"] for s in sizes) <= 11 + _SEGMENT
    assert all(
        s["names_in_window"] + s["names_below_window"] == 20 * (n + 1) for n, s in enumerate(sizes)
    )
    assert sizes[-1]["names_below_window"] >= 600 - 11 - _SEGMENT


def test_weakness6_files_still_being_written_are_not_emitted(
    any_landing: Landing, clock: ManualClock
) -> None:
    """IBM emitted files while they were written, then again when their mtime moved."""
    now_ns = round(clock.now * S)
    any_landing.put("done.csv", "d", now_ns - 60 * S)
    any_landing.put("big.csv._COPYING_", "partial", now_ns - 60 * S)
    any_landing.put(".part-0.inprogress", "partial", now_ns - 60 * S)
    any_landing.put("_temporary", "partial", now_ns - 60 * S)
    any_landing.put("young.csv", "still growing", now_ns - 1 * S)
    scan = make_scan(any_landing, clock, min_file_age="10s")
    assert names(scan) == ["done.csv"]
    # The writers finish: the copy is renamed, the young file gets its last write.
    any_landing.fs.rename(any_landing.path("big.csv._COPYING_"), any_landing.path("big.csv"))
    any_landing.put("young.csv", "still growing, done", now_ns + 2 * S)
    clock.advance(5)
    assert names(scan) == ["big.csv"]  # landed late (its mtime ties done.csv); young.csv is 3 s old
    clock.advance(10)
    assert names(scan) == ["young.csv"]
    clock.advance(60)
    assert names(scan) == []  # emitted once, and never the partial versions


def test_weakness6_renamed_copy_is_caught_by_the_late_window(
    landing: Landing, clock: ManualClock
) -> None:
    """``hdfs dfs -put`` renames X._COPYING_ to X keeping the mtime of its last write, which may
    be older than files emitted meanwhile: the late window still emits it once."""
    landing.put("big.csv._COPYING_", "x" * 100, T0 + 10 * S)
    landing.put("small.csv", "y", T0 + 12 * S)
    scan = make_scan(landing, clock, late_window="1m")
    assert names(scan) == ["small.csv"]
    landing.fs.rename(landing.path("big.csv._COPYING_"), landing.path("big.csv"))
    clock.advance(5)
    assert names(scan) == ["big.csv"]


# -- control input ----------------------------------------------------------------------------


def test_set_directory_is_confined_to_roots_and_starts_the_new_directory_afresh(
    landing: Landing, clock: ManualClock
) -> None:
    other = landing.root + "/other"
    landing.fs.mkdirs(other)
    landing.put("a", "a", T0 + 5 * S)
    landing.fs.create(other + "/old").close()
    landing.set_mtime(other + "/old", T0)  # older than the key reached in the first directory
    scan = make_scan(landing, clock, roots=[landing.root])
    assert names(scan) == ["a"]
    with pytest.raises(ValueError, match=r"'/etc' is outside the allowed roots"):
        scan.set_directory("/etc")
    with pytest.raises(ValueError, match="outside the allowed roots"):
        scan.set_directory(landing.root + "/../escape")
    cut = scan.checkpoint(1)
    scan.set_directory(other)
    assert names(scan) == ["old"]
    moved = scan.checkpoint(2)
    assert moved["directory"] == other
    scan.reset(cut)  # the change came after the cut: undone
    assert scan.directory == landing.dir
    assert names(scan) == []
    scan.reset(moved)
    assert scan.directory == other and names(scan) == []


def test_late_window_changed_between_runs(landing: Landing, clock: ManualClock) -> None:
    """10m -> 0 -> 10m on the same checkpoints: each run follows its own setting, nothing is
    read twice, and a file passed over under 0 stays passed over (it was reported)."""
    for i in range(5):
        landing.put(f"f{i}", "x", T0 + i * S)
    first = make_scan(landing, clock)
    assert names(first) == [f"f{i}" for i in range(5)]
    strict = make_scan(landing, clock, late_window=0)
    strict.reset(json.loads(json.dumps(first.checkpoint(1))))
    landing.put("late-a", "x", T0 + 2 * S)
    landing.put("g", "x", T0 + 10 * S)
    assert names(strict) == ["g"] and strict.passed_over == 1
    wide = make_scan(landing, clock)
    wide.reset(json.loads(json.dumps(strict.checkpoint(2))))
    landing.put("late-b", "x", T0 + 3 * S)
    assert names(wide) == ["late-b"] and wide.passed_over == 1
    assert names(make_scan(landing, clock, late_window="1s")) != []  # a fresh scan reads all
    narrow = make_scan(landing, clock, late_window="1s")
    narrow.reset(json.loads(json.dumps(wide.checkpoint(3))))
    clock.advance(5)
    assert names(narrow) == []


def test_a_file_that_matches_a_widened_pattern_is_new(landing: Landing, clock: ManualClock) -> None:
    landing.put("a.txt", "x", T0)
    landing.put("b.csv", "x", T0 + 1 * S)
    landing.put("c.csv", "x", T0 + 3600 * S)
    csv = make_scan(landing, clock, pattern=r".*\.csv")
    assert names(csv) == ["b.csv", "c.csv"]
    every = make_scan(landing, clock)
    every.reset(json.loads(json.dumps(csv.checkpoint(1))))
    assert names(every) == ["a.txt"]  # an hour below the window: the census names it


def test_symbolic_links_in_the_landing_directory_are_left_out_and_logged(
    landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A link may point anywhere (/etc/hostname): its target is never read, and each link is
    named once in the log, broken ones too."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the output\n")
    landing.put("a.txt", "a", T0)
    os.symlink(outside, landing.path("leak.txt"))
    os.symlink(landing.path("a.txt"), landing.path("alias.txt"))
    os.symlink(tmp_path / "missing", landing.path("broken.txt"))
    scan = make_scan(landing, clock)
    with caplog.at_level(logging.WARNING, logger="operators.fs.local"):
        assert names(scan) == ["a.txt"]
        clock.advance(10)
        assert names(scan) == []
    assert f"leak.txt is a symbolic link to {outside}: left out" in caplog.text
    assert "alias.txt is a symbolic link to" in caplog.text
    assert "broken.txt is a symbolic link to" in caplog.text and "(broken)" in caplog.text
    assert caplog.text.count("leak.txt is a symbolic link") == 1
