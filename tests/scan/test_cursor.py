"""The scan cursor's rule against random schedules of arrivals, deletions, cuts and crashes.

No filesystem and no JVM: listings are built from a model directory, so thousands of schedules
run in seconds. Both engines use this cursor (the in-process scan and the Spark source).
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from operators.scan.census import CAPACITY, Census, name_key
from operators.scan.cursor import (
    _SEGMENT,
    LateFileError,
    ModifiedFileError,
    ScanCursor,
    describe_state,
)
from region.fs import ListingEntry

S = 1_000_000_000
T0 = 1_700_000_000 * S


def listing(directory: dict[str, int], ids: dict[str, int] | None = None) -> list[ListingEntry]:
    """The listing of a model directory; ``ids``: each name's file id (else none known)."""
    ids = ids or {}
    return sorted((m, n, "/in/" + n, 1, False, ids.get(n)) for n, m in directory.items())


class Run:
    """A cursor driven like an engine: listings, emissions, cuts and crashes (state round trip)."""

    def __init__(self, window_s: float, shuffle: random.Random | None = None) -> None:
        self.window_ns = round(window_s * S)
        self.shuffle = shuffle  # listings in no order (as a scan lists), else sorted
        self.cursor = ScanCursor(window_ns=self.window_ns)
        self.directory: dict[str, int] = {}
        self.ids: dict[str, int] = {}  # each name's file id, where the test gives one
        self.committed: list[str] = []  # emitted and covered by a cut
        self.uncommitted: list[str] = []
        self.uncommitted_ids = []
        self.read: list[tuple[str, int | None]] = []  # (name, file id) emitted, covered by a cut
        self.state: dict[str, Any] | None = None

    def scan(self, take: int | None = None) -> list[str]:
        listed = listing(self.directory, self.ids)
        if self.shuffle is not None:
            self.shuffle.shuffle(listed)
        new = self.cursor.new_files(listed)
        assert new == sorted(new), "new files out of (mtime_ns, name) order"
        emitted = new if take is None else new[:take]
        for entry in emitted:
            self.cursor.emit(entry)
            self.uncommitted.append(entry[1])
            self.uncommitted_ids.append(entry[5])
        return [e[1] for e in emitted]

    uncommitted_ids: list[int | None]

    def cut(self) -> None:
        self.state = json.loads(json.dumps(self.cursor.state()))
        self.committed += self.uncommitted
        self.read += zip(self.uncommitted, self.uncommitted_ids, strict=True)
        self.uncommitted = []
        self.uncommitted_ids = []

    def crash(self) -> None:
        self.cursor = ScanCursor(window_ns=self.window_ns)
        self.cursor.reset(self.state)
        self.uncommitted = []
        self.uncommitted_ids = []


# (operation, amount, which name)
_ops = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "newer",
                "tie",
                "late",
                "ancient",
                "delete",
                "grow",
                "replace",
                "scan",
                "part",
                "cut",
                "crash",
            ]
        ),
        st.integers(0, 30),
        st.integers(0, 1000),
    ),
    max_size=60,
)


def play(runs: list[Run], ops: list[tuple[str, int, int]]) -> int:
    """Apply ``ops`` to every run in step (each its own directory); the files landed (each
    with a file id of its own: a file replaced under a name read before is one more)."""
    names = 0
    files = 0
    newest = T0
    for op, amount, pick in ops:
        steps: list[list[str]] = []
        if op == "replace" and runs[0].committed:
            # Only over a file read (one replaced again before any scan is never seen).
            name = runs[0].committed[pick % len(runs[0].committed)]
            if (name, runs[0].ids.get(name)) not in runs[0].read:
                continue
        for run in runs:
            if op in ("newer", "tie", "late", "ancient"):
                mtime = {
                    "newer": newest + amount * S,
                    "tie": newest,
                    "late": newest - amount * S // 10,
                    "ancient": newest - (1000 + amount) * S,
                }[op]
                run.directory[f"f{names:03d}-{pick}"] = mtime
                run.ids[f"f{names:03d}-{pick}"] = files
            elif op == "delete" and run.committed:
                # Housekeeping removes files already read (never one not read yet).
                name = run.committed[pick % len(run.committed)]
                if (name, run.ids.get(name)) in run.read:
                    run.directory.pop(name, None)
            elif op == "grow" and run.committed:
                # A file read before grows (or is touched): a new mtime, the same name.
                name = run.committed[pick % len(run.committed)]
                if name in run.directory:
                    run.directory[name] = newest + amount * S
            elif op == "replace" and run.committed:
                # Another file lands over a name read before (mv new.tmp name): a new file id
                # and a new mtime (one with the mtime read, cp -p over it, is not seen).
                name = run.committed[pick % len(run.committed)]
                if name in run.directory:
                    run.directory[name] = newest + (amount + 1) * S
                    run.ids[name] = files
            elif op == "scan":
                steps.append(run.scan())
            elif op == "part":
                steps.append(run.scan(take=amount % 3))
            elif op == "cut":
                run.cut()
            elif op == "crash":
                run.crash()
        assert all(step == steps[0] for step in steps), f"runs differ at {op}: {steps}"
        if op in ("newer", "tie", "late", "ancient"):
            names += 1
            files += 1
            newest = max(newest, runs[0].directory[f"f{names - 1:03d}-{pick}"])
        elif op in ("grow", "replace") and runs[0].committed:
            name = runs[0].committed[pick % len(runs[0].committed)]
            if name in runs[0].directory:
                newest += (amount + (op == "replace")) * S
                files += op == "replace"
    for run in runs:
        run.scan()
        run.cut()
    return files


@settings(max_examples=1500, deadline=None)
@given(ops=_ops, window_s=st.sampled_from([0.0, 5.0, 600.0]))
def test_every_file_that_lands_is_emitted_once_or_reported(
    ops: list[tuple[str, int, int]], window_s: float
) -> None:
    """Also files replaced under a name read before (another file id): read again whole, once.
    Only after a restart, where the name's file id is no longer known (below the late window),
    is one reported as changed instead (``modified``), as a file changed in place is."""
    run = Run(window_s)
    landed = play([run], ops)
    emitted = run.read
    assert len(emitted) == len(set(emitted)), "a file was emitted twice"
    assert {i for _, i in emitted} <= set(range(landed))
    missed = landed - len(emitted)
    if "crash" not in {op for op, _, _ in ops}:
        assert missed == run.cursor.passed_over  # a replaced file is new: never "modified"
    elif window_s:
        assert missed <= run.cursor.modified
    else:
        assert missed <= run.cursor.passed_over + run.cursor.modified
    if window_s:
        assert run.cursor.passed_over == 0


@settings(max_examples=500, deadline=None)
@given(ops=_ops, window_s=st.sampled_from([0.0, 5.0, 600.0]), seed=st.integers(0, 2**32))
def test_the_order_of_a_listing_changes_nothing(
    ops: list[tuple[str, int, int]], window_s: float, seed: int
) -> None:
    """A scan hands the cursor its listing unsorted (sorting every file of a huge directory
    each scan cost more than the rest of the scan): the same files are new, in the same order,
    with the same state, as from a sorted listing."""
    ordered, unordered = Run(window_s), Run(window_s, shuffle=random.Random(seed))
    play([ordered, unordered], ops)
    assert ordered.committed == unordered.committed
    assert ordered.cursor.state() == unordered.cursor.state()
    assert ordered.cursor.passed_over == unordered.cursor.passed_over


def test_a_restart_finds_files_that_landed_late_while_stopped() -> None:
    run = Run(600)
    run.directory = {f"old-{i:05d}": T0 + i * S for i in range(5000)}
    assert len(run.scan()) == 5000
    run.cut()
    run.crash()
    # While stopped: 40 files land with mtimes hours before the newest, 100 old ones are
    # cleaned up, and 10 arrive within the window.
    for i in range(40):
        run.directory[f"copied-{i}"] = T0 + i * S
    for i in range(100):
        del run.directory[f"old-{i:05d}"]
    for i in range(10):
        run.directory[f"recent-{i}"] = T0 + 4990 * S
    found = run.scan()
    assert sorted(found) == sorted(
        [f"copied-{i}" for i in range(40)] + [f"recent-{i}" for i in range(10)]
    )
    run.cut()
    run.crash()
    assert run.scan() == []


def test_more_changes_than_the_census_resolves_are_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run(60)
    run.directory = {f"old-{i:05d}": T0 + i * S for i in range(3000)}
    run.scan()
    run.cut()
    run.crash()
    for i in range(2 * CAPACITY):  # far more than the census can tell apart
        del run.directory[f"old-{i:05d}"]
        run.directory[f"copied-{i}"] = T0 + i * S
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        run.scan()
    assert "changed while the scan was stopped than its census tells apart" in caplog.text
    assert run.cursor.passed_over >= 1
    strict = Run(60)
    strict.cursor = ScanCursor(window_ns=60 * S, on_late_file="fail")
    strict.cursor.reset(run.state)
    with pytest.raises(LateFileError, match="cannot be told from files already read"):
        strict.cursor.new_files(listing(run.directory))


def test_strict_window_fails_on_a_late_file_when_asked() -> None:
    cursor = ScanCursor(window_ns=0, on_late_file="fail", display=lambda p: "hdfs://nn" + p)
    for entry in cursor.new_files(listing({"b": T0 + 10 * S})):
        cursor.emit(entry)
    with pytest.raises(LateFileError, match=r"hdfs://nn/in/a landed late .* 10.000s before"):
        cursor.new_files(listing({"a": T0, "b": T0 + 10 * S}))
    # Nothing was accounted for: the same listing fails again (after a fix, it is read).
    with pytest.raises(LateFileError):
        cursor.new_files(listing({"a": T0, "b": T0 + 10 * S}))


def test_state_at_ten_files_a_second_with_the_default_window_stays_under_64_kb() -> None:
    """The budget: 10 files/s of steady arrivals, a 10 minute window: 6,000 names, each with
    the file id of the file read (HDFS fileIds counted up by a busy cluster between two)."""
    run = Run(600)
    gaps = random.Random(7)
    file_id = 16_386
    for i in range(12_000):  # 20 minutes: the window is full, the rest is in the census
        name = f"events-2026-11-23T10-{i:06d}.jsonl"
        run.directory[name] = T0 + i * S // 10
        file_id += gaps.randrange(1, 1000)
        run.ids[name] = file_id
    run.scan()
    state = run.cursor.state()
    size = len(json.dumps(state))
    described = describe_state(state)
    # The window holds the 6,001 names within 10 minutes of the newest, plus at most one
    # segment of names just below it (segments leave the window whole).
    assert 6001 <= described["names_in_window"] <= 6001 + _SEGMENT
    assert described["names_in_window"] + described["names_below_window"] == 12_000
    assert size <= 64 * 1024, size
    restored = ScanCursor(window_ns=600 * S)
    restored.reset(json.loads(json.dumps(state)))
    assert all(restored._window.file_id(n) == run.ids[n] for n in restored._window.where)


def test_a_checkpoint_of_the_earlier_format_is_read(caplog: pytest.LogCaptureFixture) -> None:
    cursor = ScanCursor(window_ns=60 * S)
    cursor.reset({"key": {"mtime_ns": T0 + 100 * S, "name": "b"}, "late": {"b": T0 + 100 * S}})
    files = {"a": T0, "b": T0 + 100 * S, "c": T0 + 90 * S, "d": T0 + 200 * S}
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert [e[1] for e in cursor.new_files(listing(files))] == ["c", "d"]
    assert "predates the census" in caplog.text


def test_census_names_the_difference() -> None:
    names = [f"part-{i:07d}.csv" for i in range(20_000)]
    before = Census.of(names)
    after = Census.of([*names[100:], "late-1", "late-2"])
    diff = after.subtract(before)
    assert diff.complete and diff.net == -98
    assert diff.added == {name_key("late-1"), name_key("late-2")}
    assert diff.removed == {name_key(n) for n in names[:100]}
    assert Census.decode(after.encode()) == after
    with pytest.raises(ValueError, match="census is not readable"):
        Census.decode("not base64!")


def test_late_files_found_by_the_census_but_not_emitted_before_a_cut_are_found_again() -> None:
    """Spark plans only part of what is new (max_files_per_trigger): the rest is not accounted."""
    run = Run(60)
    run.directory = {f"old-{i}": T0 + i * S for i in range(200)}
    run.scan()
    run.cut()
    run.crash()
    for i in range(3):
        run.directory[f"copied-{i}"] = T0 + i * S
    assert run.scan(take=1) == ["copied-0"]
    run.cut()
    run.crash()
    assert run.scan() == ["copied-1", "copied-2"]


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
@pytest.mark.parametrize("far", [False, True], ids=["in the window", "below the window"])
def test_a_file_that_changes_after_it_was_read_is_reported_once_not_read_again(
    caplog: pytest.LogCaptureFixture, restart: bool, far: bool
) -> None:
    run = Run(60)
    run.directory = {f"f{i:03d}": T0 + i * S for i in range(200)}
    run.scan()
    run.cut()
    if restart:
        run.crash()
    grown = "f000" if far else "f190"  # read 199 s / 9 s before the newest
    run.directory[grown] = T0 + 500 * S  # it grew: the newest mtime of all now
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert run.scan() == []
        assert run.scan() == []  # the next listing does not take it for a new file either
    assert caplog.text.count(f"{grown} changed after it was read") == 1
    assert run.cursor.modified == 1
    run.cut()
    run.crash()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert run.scan() == []  # reported once, also across a restart
    assert caplog.text == "" and run.cursor.modified == 1


def test_on_modified_reread_reads_a_changed_file_again_and_fail_stops() -> None:
    run = Run(60)
    run.cursor = ScanCursor(window_ns=60 * S, on_modified="reread")
    run.directory = {"a": T0, "b": T0 + S}
    assert run.scan() == ["a", "b"]
    run.directory["a"] = T0 + 5 * S
    assert run.scan() == ["a"]
    failing = ScanCursor(window_ns=60 * S, on_modified="fail")
    for entry in failing.new_files(listing({"a": T0})):
        failing.emit(entry)
    with pytest.raises(ModifiedFileError, match=r"/in/a changed after it was read .* by 5.000s"):
        failing.new_files(listing({"a": T0 + 5 * S}))


@pytest.mark.parametrize("far", [False, True], ids=["in-window", "below-window"])
@pytest.mark.parametrize("restart", [False, True], ids=["running", "restarted"])
def test_a_name_deleted_after_it_was_read_and_landing_again_later_is_a_new_file(
    caplog: pytest.LogCaptureFixture, restart: bool, far: bool
) -> None:
    # The hourly export that writes data.csv again once the last one was cleared away. A scan
    # that saw the name gone reads the new file, whether or not it restarted in between
    # (restarted, the window used to keep the name and report the new file as changed).
    run = Run(60)
    run.directory = {"data.csv": T0, "other": T0 + (100 if far else 1) * S}
    assert run.scan() == ["data.csv", "other"]
    run.cut()
    del run.directory["data.csv"]
    if restart:
        run.crash()
    assert run.scan() == []
    run.cut()
    if restart:
        run.crash()
    run.directory["data.csv"] = T0 + 200 * S
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert run.scan() == ["data.csv"]
    assert caplog.text == "" and run.cursor.modified == 0


# -- after_read and skewed clocks ---------------------------------------------------------------

_arrivals = st.lists(
    st.tuples(
        st.sampled_from(
            ["land", "land", "ahead", "skew", "reland", "tick", "scan", "cut", "leave", "crash"]
        ),
        st.integers(1, 30),
        st.integers(0, 1000),
    ),
    max_size=60,
)


class LeavingRun:
    """A scan with ``after_read``: files a completed cut covers leave the directory (the scan
    forgets their names), exports land again under names that left, some writers' clocks are
    hours ahead, and the process restarts from its last cut (whose state still lists the files
    it had not moved yet, as the scan's does)."""

    def __init__(self, window_s: float) -> None:
        self.window_ns = round(window_s * S)
        self.cursor = ScanCursor(window_ns=self.window_ns)
        self.now = T0
        self.directory: dict[str, tuple[int, int]] = {}  # name -> (mtime, generation)
        self.landed: list[tuple[str, int]] = []
        self.committed: list[tuple[str, int]] = []
        self.uncommitted: list[tuple[str, int, int]] = []  # name, generation, mtime
        self.pending: list[tuple[str, int, int]] = []  # covered by a cut, not moved yet
        self.state: dict[str, Any] | None = None
        self.state_pending: list[tuple[str, int, int]] = []

    def land(self, name: str, mtime: int) -> None:
        self.now += S // 1000  # every write has its own mtime (ns clocks)
        generation = len(self.landed)
        self.directory[name] = (mtime, generation)
        self.landed.append((name, generation))

    def scan(self) -> None:
        listed = sorted((m, n, "/in/" + n, 1, False, g) for n, (m, g) in self.directory.items())
        for entry in self.cursor.new_files(listed, now_ns=self.now):
            self.cursor.emit(entry)
            self.uncommitted.append((entry[1], self.directory[entry[1]][1], entry[0]))

    def cut(self) -> None:
        self.pending += self.uncommitted
        self.committed += [(n, g) for n, g, _ in self.uncommitted]
        self.uncommitted = []
        self.state = json.loads(json.dumps(self.cursor.state()))
        self.state_pending = list(self.pending)

    def leave(self) -> None:
        """after_read for the files the last cut covers (AfterRead.handle, then forget)."""
        for name, generation, mtime in self.pending:
            if self.directory.get(name, (0, generation))[1] == generation:
                self.directory.pop(name, None)  # archived (or gone already)
            # else: another file stands under the name: the one read left before.
            self.cursor.forget([(name, mtime)])
        self.pending = []

    def crash(self) -> None:
        self.cursor = ScanCursor(window_ns=self.window_ns)
        self.cursor.reset(self.state)
        self.uncommitted = []
        self.pending = list(self.state_pending)
        self.leave()  # a reset to the cut finishes its after_read before the first listing


@settings(max_examples=800, deadline=None)
@given(ops=_arrivals, window_s=st.sampled_from([0.0, 5.0, 600.0]))
# An export landing under the name of an archived file whose mtime was ahead, with the time
# of the listing that read that file as its mtime: new, also with late_window = 0.
@example(
    ops=[("ahead", 1, 0), ("scan", 1, 0), ("cut", 1, 0), ("leave", 1, 0), ("reland", 1, 0)],
    window_s=0.0,
)
# A file moved away is forgotten after a restart, then the process dies again before a
# listing: the name must not come back from the census (the next export under it is new).
@example(
    ops=[
        *[("land", 1, 0), ("scan", 1, 0), ("cut", 1, 0), ("crash", 1, 0), ("reland", 1, 0)],
        *[("cut", 1, 0), ("crash", 1, 0)],
    ],
    window_s=0.0,
)
def test_with_after_read_and_skewed_clocks_every_file_is_emitted_once(
    ops: list[tuple[str, int, int]], window_s: float
) -> None:
    run = LeavingRun(window_s)
    for op, amount, pick in ops:
        if op == "land":
            run.land(f"f{len(run.landed):03d}", run.now)
        elif op == "ahead":  # a writer whose clock is hours ahead
            run.land(f"f{len(run.landed):03d}", run.now + amount * 3600 * S)
        elif op == "skew":  # seconds ahead (a NameNode's clock)
            run.land(f"f{len(run.landed):03d}", run.now + amount * S)
        elif op == "reland":  # the next export, under a name whose file left
            gone = sorted({n for n, _ in run.landed} - run.directory.keys())
            if gone:
                run.land(gone[pick % len(gone)], run.now)
        elif op == "tick":
            run.now += amount * S
        elif op == "scan":
            run.scan()
        elif op == "cut":
            run.cut()
        elif op == "leave":
            run.leave()
        elif op == "crash":
            run.crash()
    run.scan()
    run.cut()
    assert sorted(run.committed) == sorted(run.landed)
    assert run.cursor.passed_over == 0 and run.cursor.modified == 0


def test_a_future_mtime_leaves_no_key_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cursor = ScanCursor(window_ns=600 * S)
    ahead = T0 + 86_400 * S
    first = [
        (T0 - S, "a", "/in/a", 1, False, None),
        (ahead, "skewed", "/in/skewed", 1, False, None),
    ]
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        new = cursor.new_files(first, now_ns=T0)
        cursor.emit_many(new)
    assert [e[1] for e in new] == ["a", "skewed"]
    assert cursor.key == (T0 - S, "a") and cursor.floor == T0 - 601 * S
    assert caplog.text.count("/in/skewed has an mtime 86400.000s ahead") == 1
    # A file landing after it (mtime now) is new, also after a restart; the skewed one is not.
    later = [*first, (T0 + 10 * S, "b", "/in/b", 1, False, None)]
    state = json.loads(json.dumps(cursor.state()))
    restarted = ScanCursor(window_ns=600 * S)
    restarted.reset(state)
    for c in (cursor, restarted):
        assert [e[1] for e in c.new_files(later, now_ns=T0 + 20 * S)] == ["b"]
    assert describe_state(state)["names_in_window"] == 2


@pytest.mark.parametrize("first", [[], [(T0 - S, "a", "/in/a", 1, False, None)]])
def test_strict_a_file_at_the_listing_time_after_a_future_mtime_is_new(
    first: list[ListingEntry],
) -> None:
    """late_window = 0: a file landing after a listing with an mtime equal to the listing's
    time (coarse mtime clocks) is not late for a file ahead of that listing, whatever their
    names: the next export under the name of the one ahead (moved away by after_read) too."""
    cursor = ScanCursor(window_ns=0)
    skewed = (T0 + 3600 * S, "m", "/in/m", 1, False, None)
    new = cursor.new_files([*first, skewed], now_ns=T0)
    cursor.emit_many(new)
    assert new == [*first, skewed]
    cursor.forget([("m", skewed[0])])
    state = json.loads(json.dumps(cursor.state()))
    restarted = ScanCursor(window_ns=0)
    restarted.reset(state)
    landed = [*first, (T0, "b", "/in/b", 1, False, None), (T0, "m", "/in/m", 1, False, None)]
    for c in (cursor, restarted):
        assert [e[1] for e in c.new_files(landed, now_ns=T0 + S)] == ["b", "m"]
        assert c.passed_over == 0


# -- a file replaced under a name read before ---------------------------------------------------


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after a restart"])
def test_a_file_replaced_under_a_name_read_before_is_read_whole_once_one_appended_is_reported(
    caplog: pytest.LogCaptureFixture, restart: bool
) -> None:
    """``mv new.tmp daily.csv`` over the file read: another file (another file id) is new
    data, read whole, once, and not counted as changed; the same file appended to in place
    (its id kept) follows ``on_modified``. After a restart the ids of the names within the
    late window come from the checkpoint."""
    run = Run(600)
    run.directory = {"daily.csv": T0, "log.txt": T0 + S}
    run.ids = {"daily.csv": 11, "log.txt": 12}
    assert run.scan() == ["daily.csv", "log.txt"]
    run.cut()
    if restart:
        run.crash()
    run.directory["daily.csv"] = T0 + 30 * S
    run.ids["daily.csv"] = 13  # replaced: a new file under the name
    run.directory["log.txt"] = T0 + 31 * S  # appended to in place: the same id
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert run.scan() == ["daily.csv"]
        assert run.scan() == []
    assert "daily.csv" not in caplog.text
    assert caplog.text.count("log.txt changed after it was read") == 1
    assert run.cursor.modified == 1
    run.cut()
    run.crash()
    assert run.scan() == []  # read once, also across a restart
    run.directory["daily.csv"] = T0 + 60 * S
    run.ids["daily.csv"] = 14  # the next export, replaced again
    assert run.scan() == ["daily.csv"]
    assert run.cursor.modified == 1


def test_a_replaced_file_whose_first_id_is_not_known_follows_on_modified(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where the id of the file read is not known (after a restart, a name below the late
    window, which only the census holds), a new mtime is taken as a change in place: reported,
    never read twice. So is a file that got the inode of the one deleted before (ext4 reuses
    a freed inode at once) landing between two listings."""
    run = Run(60)
    # A full segment of names below the window: they leave it for the census.
    run.directory = {f"f{i:03d}": T0 + i for i in range(_SEGMENT)}
    run.directory.update({"daily.csv": T0, "later": T0 + 500 * S})
    run.ids = {n: i for i, n in enumerate(run.directory)}
    assert len(run.scan()) == _SEGMENT + 2
    run.cut()
    run.crash()
    run.directory["daily.csv"] = T0 + 600 * S
    run.ids["daily.csv"] = 1000
    run.directory["later"] = T0 + 601 * S  # deleted, landed again with its inode
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert run.scan() == []
    assert caplog.text.count("changed after it was read") == 2
    assert run.cursor.modified == 2
    # From that listing on, the running scan knows the ids of what it accounted for.
    run.directory["daily.csv"] = T0 + 700 * S
    run.ids["daily.csv"] = 1001
    assert run.scan() == ["daily.csv"]
    assert run.cursor.modified == 2


def test_ids_of_the_files_read_are_read_through_identify_only_where_the_listing_has_none() -> None:
    """hdfs://: the listing has no file ids; ``identify`` reads them for the files emitted and
    for the names found changed, never for the files that did not change."""
    asked: list[list[str]] = []
    current = {"/in/a": 1, "/in/b": 2, "/in/c": 3}

    def identify(paths: list[str]) -> list[int | None]:
        asked.append(paths)
        return [current.get(p) for p in paths]

    cursor = ScanCursor(window_ns=60 * S, identify=identify)
    for entry in cursor.new_files(listing({"a": T0, "b": T0 + S})):
        cursor.emit(entry)
    assert asked == [["/in/a", "/in/b"]]
    asked.clear()
    assert cursor.new_files(listing({"a": T0, "b": T0 + S})) == []
    assert asked == []
    current["/in/a"] = 4  # replaced
    new = cursor.new_files(listing({"a": T0 + 5 * S, "b": T0 + S, "c": T0 + 6 * S}))
    assert [(e[1], e[5]) for e in new] == [("a", 4), ("c", 3)]
    assert asked == [["/in/a"], ["/in/c"]]
    assert cursor.modified == 0


def test_a_checkpoint_whose_window_has_no_file_ids_is_read() -> None:
    """A window written before file ids were kept (``[names, mtime deltas]``) restores; a file
    changed under one of its names is then reported, as before (the id of the file read is not
    known), and the ids of the next listing are kept from then on."""
    import base64
    import zlib

    raw = json.dumps([["a", "b"], [T0, S]]).encode()
    old = base64.b64encode(zlib.compress(raw)).decode()
    state = {**ScanCursor(window_ns=60 * S).state(), "key": {"mtime_ns": T0 + S, "name": "b"}}
    state.update(floor=T0 - 59 * S, window=[old])
    cursor = ScanCursor(window_ns=60 * S)
    cursor.reset(state)
    assert cursor.window_size == 2
    assert cursor.new_files(listing({"a": T0 + 2 * S, "b": T0 + S}, {"a": 5, "b": 6})) == []
    assert cursor.modified == 1
    # The ids of that listing are known from then on: "b" replaced is new.
    new = cursor.new_files(listing({"a": T0 + 2 * S, "b": T0 + 3 * S}, {"a": 5, "b": 7}))
    assert [e[1] for e in new] == ["b"]
    assert cursor.modified == 1
