"""The region controller step by step, with participants that fail on demand.

Each test says what was committed to the checkpoint store and what was not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from operators.testing import ManualClock
from region.checkpoint import CheckpointStore
from region.controller import ALLOWED_TRANSITIONS, RegionController, RegionStatus
from region.errors import (
    CheckpointError,
    ConfigError,
    LockLostError,
    LockUnsafeError,
    RegionFailedError,
    RegionStoppedError,
    permanent,
)
from tests.region._participants import Probe, region_settings, wait_until
from tests.region.conftest import FlakyFileSystem

NAMES = ("scan", "source", "sink")


class Region:
    """Three journaling participants (in topological order) under one controller."""

    def __init__(self, store: CheckpointStore, **settings: Any) -> None:
        self.journal: list[tuple[str, str]] = []
        self.clock = ManualClock(1000.0)
        self.store = store
        self.ops = {n: Probe(n, self.journal, clock=self.clock) for n in NAMES}
        self.controller = RegionController(
            region_settings(**settings), list(self.ops.values()), store, clock=self.clock
        )

    def calls(self) -> list[tuple[str, str]]:
        calls = list(self.journal)
        self.journal.clear()
        return calls

    def committed(self) -> list[int]:
        return [info.cut_id for info in self.store.list()]


@pytest.fixture
def region(make_store: Callable[..., CheckpointStore]) -> Callable[..., Region]:
    def make(**settings: Any) -> Region:
        return Region(make_store(), **settings)

    return make


def each(call: str) -> list[tuple[str, str]]:
    return [(n, call) for n in NAMES]


# ---------------------------------------------------------------------- start and recovery


def test_fresh_start_resets_every_operator_to_initial_state_then_opens_permits(region):
    r = region()
    assert r.controller.status is RegionStatus.RESETTING
    assert r.controller.permits.blocked  # nothing flows before the first reset
    r.controller.start()
    assert r.calls() == each("reset_to_initial_state")
    assert r.controller.status is RegionStatus.PROCESSING
    assert not r.controller.permits.blocked
    snap = r.controller.snapshot()
    assert (snap.cuts, snap.resets, snap.last_cut_id, snap.last_error) == (0, 0, None, None)


def test_restart_resumes_from_newest_cut_and_never_reuses_a_cut_id(make_store):
    first = Region(make_store())
    first.controller.start()
    assert first.controller.make_consistent()
    assert first.controller.make_consistent()
    newest = first.committed()[-1]

    second = Region(make_store())
    second.controller.start()
    assert second.calls() == [(n, f"reset {newest}") for n in NAMES]
    assert second.controller.snapshot().last_cut_id == newest
    assert second.controller.make_consistent()
    assert second.committed()[-1] == newest + 1
    # The recovered cut is retired once a newer one completed.
    assert ("sink", f"retire {newest}") in second.calls()


def test_a_reset_is_told_whether_the_cut_completion_finished_also_across_a_restart(make_store):
    first = Region(make_store())
    first.controller.start()
    assert first.controller.make_consistent()
    done = first.committed()[-1]
    first.controller.report_failure("source", OSError(5, "read failed", "/in/a.txt"))
    assert first.ops["sink"].recalled == [done]
    # A cut whose completion failed is durable, but nothing may be assumed about it.
    first.ops["sink"].faults.arm("on_cut_completed", OSError(5, "rename failed", "/out/p"))
    assert not first.controller.make_consistent()
    assert first.ops["sink"].recalled == [done]
    assert first.controller.make_consistent()
    newest = first.committed()[-1]
    # A restart learns it from the store: the completion of `newest` was recorded.
    second = Region(make_store())
    second.controller.start()
    assert [op.recalled for op in second.ops.values()] == [[newest]] * 3
    # Without the record (lost in a crash before it was written), nothing is assumed.
    store = make_store()
    store.fs.delete(store.directory + f"/cut-{newest:012d}.done")
    third = Region(store)
    third.controller.start()
    assert [op.recalled for op in third.ops.values()] == [[]] * 3
    assert third.calls() == [(n, f"reset {newest}") for n in NAMES]


def test_checkpoint_without_state_of_an_operator_is_refused_at_start(make_store):
    store = make_store()
    store.write(store.next_cut_id(), {"scan": {}, "source": {}})
    r = Region(store)
    with pytest.raises(CheckpointError, match=r"no state for operator\(s\) \['sink'\]"):
        r.controller.start()
    assert r.calls() == []  # nobody was reset to a partial cut
    assert r.controller.status is RegionStatus.FAILED


def test_operator_names_must_be_unique(make_store):
    journal: list[tuple[str, str]] = []
    with pytest.raises(ConfigError, match="repeated: \\['a'\\]"):
        RegionController(
            region_settings(), [Probe("a", journal), Probe("a", journal)], make_store()
        )


# ---------------------------------------------------------------------- the cut


def test_cut_drains_all_then_checkpoints_all_then_commits_then_completes_then_retires(region):
    r = region()
    r.controller.start()
    r.calls()
    assert r.controller.make_consistent()
    first = r.committed()[-1]
    assert r.calls() == [
        *each("drain"),
        *each(f"checkpoint {first}"),
        *each(f"on_cut_completed {first}"),
    ]
    checkpoint = r.store.latest()
    assert checkpoint is not None and checkpoint.cut_id == first
    assert checkpoint.operators == {n: {"counter": 1, "cut": first} for n in NAMES}

    assert r.controller.make_consistent()
    second = r.committed()[-1]
    assert second > first
    assert r.calls()[-3:] == each(f"retire {first}")
    snap = r.controller.snapshot()
    assert (snap.status, snap.cuts, snap.last_cut_id) == (RegionStatus.PROCESSING, 2, second)
    assert snap.last_cut_seconds is not None


def test_cut_waits_for_the_batch_in_flight(region):
    r = region()
    r.controller.start()
    done: list[bool] = []
    permits = r.controller.permits
    permits.acquire()  # a batch is in flight on this thread
    cutter = threading.Thread(target=lambda: done.append(r.controller.make_consistent()))
    cutter.start()
    wait_until(lambda: r.controller.status is RegionStatus.DRAINING, "the cut to start")
    assert not permits.acquire(timeout=0)  # blocked: no new batch may start
    assert r.calls() == each("reset_to_initial_state")  # nothing drained yet
    permits.release()
    cutter.join()
    assert done == [True]
    assert r.calls()[:3] == each("drain")


def test_make_consistent_from_a_thread_holding_a_permit_hands_it_back_meanwhile(region):
    r = region()
    r.controller.start()
    with r.controller.permits.hold():
        assert r.controller.make_consistent()
        assert r.controller.permits.held_by_current_thread == 1
    assert r.controller.permits.outstanding == 0


def test_drain_failure_resets_to_last_cut_and_commits_nothing(region):
    r = region()
    r.controller.start()
    assert r.controller.make_consistent()
    good = r.committed()
    r.calls()
    r.ops["source"].faults.arm("drain", OSError("read failed at offset 512 of /in/a.txt"))
    assert r.controller.make_consistent() is False
    assert r.committed() == good
    calls = r.calls()
    assert calls[:2] == [("scan", "drain"), ("source", "drain")]
    assert not any(c.startswith("checkpoint") for _, c in calls)
    assert calls[2:] == [(n, f"reset {good[-1]}") for n in NAMES]
    snap = r.controller.snapshot()
    assert (snap.status, snap.resets, snap.consecutive_resets) == (RegionStatus.PROCESSING, 1, 1)
    assert "operator 'source' raised OSError" in (snap.last_error or "")
    assert "offset 512" in (snap.last_error or "")


def test_checkpoint_failure_resets_and_commits_nothing(region):
    r = region()
    r.controller.start()
    r.calls()
    r.ops["sink"].faults.arm("checkpoint", ValueError("state is not serialisable"))
    assert r.controller.make_consistent() is False
    assert r.committed() == []
    calls = r.calls()
    assert not any(c.startswith("on_cut_completed") for _, c in calls)
    assert calls[-3:] == each("reset_to_initial_state")  # no cut yet: back to the start


def test_drain_slower_than_drain_timeout_resets_instead_of_checkpointing(region):
    r = region(drain_timeout="10s")
    r.controller.start()
    assert r.controller.make_consistent()
    good = r.committed()
    r.calls()
    r.ops["source"].drain_seconds = 11.0
    assert r.controller.make_consistent() is False
    assert r.committed() == good
    calls = r.calls()
    assert not any(c.startswith("checkpoint") for _, c in calls)
    assert ("sink", "drain") not in calls  # gave up right after the slow operator
    snap = r.controller.snapshot()
    assert "over drain_timeout 10 s" in (snap.last_error or "")
    assert "'source'" in (snap.last_error or "")


def test_a_start_operator_holding_its_permit_past_drain_timeout_resets_the_region(region):
    r = region(drain_timeout="20ms", reset_timeout="5s")
    r.controller.start()
    permits = r.controller.permits
    permits.acquire()
    result: list[bool] = []
    cutter = threading.Thread(target=lambda: result.append(r.controller.make_consistent()))
    cutter.start()
    wait_until(lambda: r.controller.status is RegionStatus.RESETTING, "the drain to time out")
    assert r.committed() == []
    permits.release()  # the reset waits for the permit before touching any operator
    cutter.join()
    assert result == [False]
    assert "held its permit after drain_timeout" in (r.controller.snapshot().last_error or "")


def test_store_write_failure_resets_to_previous_cut_and_the_failed_id_is_not_reused(
    region, flaky_fs: FlakyFileSystem
):
    r = region()
    r.controller.start()
    assert r.controller.make_consistent()
    good = r.committed()
    r.calls()
    flaky_fs.fail_renames = 1
    assert r.controller.make_consistent() is False
    assert r.committed() == good
    calls = r.calls()
    assert not any(c.startswith("on_cut_completed") for _, c in calls)
    assert calls[-3:] == [(n, f"reset {good[-1]}") for n in NAMES]
    assert "No space left on device" in (r.controller.snapshot().last_error or "")
    assert r.controller.make_consistent()
    assert r.committed()[-1] == good[-1] + 2


def test_lost_directory_lock_fails_at_once_without_resetting_anyones_output(make_store):
    def lock_lost() -> None:
        raise LockLostError("lock of /ck taken over by host b pid 42")

    r = Region(make_store(guard=lock_lost))
    r.controller.start()
    r.calls()
    with pytest.raises(RegionFailedError, match=r"without a reset.*LockLostError.*host b pid 42"):
        r.controller.make_consistent()
    assert r.committed() == []
    calls = r.calls()
    assert not any(c.startswith("reset") or c.startswith("on_cut") for _, c in calls)
    assert r.controller.status is RegionStatus.FAILED


def test_a_reset_held_by_an_unsafe_lock_runs_as_soon_as_the_lock_is_renewed(make_store, caplog):
    """A DataNode lost mid-pipeline can fail the lock's heartbeats for tens of seconds; the
    resets meanwhile fail on the unsafe lock and their backoff grows. Once a heartbeat gets
    through, the region resets at once instead of sleeping out that backoff."""
    unsafe = threading.Event()
    unsafe.set()

    def guard() -> None:
        if unsafe.is_set():
            raise LockUnsafeError("the lock of /ck was last renewed 16.0s ago")

    r = Region(make_store(guard=guard), max_consecutive_reset_attempts=5, reset_backoff=3600)
    r.controller.start()
    r.calls()
    failing = threading.Thread(
        target=r.controller.report_failure,
        args=("sink", LockUnsafeError("the lock of /ck was last renewed 16.0s ago")),
    )
    with caplog.at_level(logging.INFO, logger="region.controller"):
        failing.start()
        wait_until(lambda: "Waiting 60.0 s" in caplog.text, "the reset to back off")
        unsafe.clear()  # a heartbeat got through
        failing.join(30)  # a minute without the renewal ending the wait
        if failing.is_alive():
            r.controller.request_stop_now()
            failing.join()
    assert r.controller.status is RegionStatus.PROCESSING
    assert r.calls()[-3:] == each("reset_to_initial_state")
    assert r.controller.snapshot().resets == 2


def test_failure_after_the_cut_is_durable_resets_to_that_cut(region):
    r = region()
    r.controller.start()
    r.calls()
    r.ops["sink"].faults.arm("on_cut_completed", OSError("rename of part-0 failed"))
    assert r.controller.make_consistent() is False
    [durable] = r.committed()
    # The reset returns to the durable cut, where the sink redoes its publishing.
    assert r.calls()[-3:] == [(n, f"reset {durable}") for n in NAMES]
    snap = r.controller.snapshot()
    assert snap.last_cut_id == durable
    assert snap.consecutive_resets == 1  # not cleared: the cut did not finish


def test_reset_failure_is_retried_and_a_completed_cut_clears_the_counter(region):
    r = region(max_consecutive_reset_attempts=3)
    r.controller.start()
    r.ops["sink"].faults.arm("drain", OSError("disk full"))
    r.ops["source"].faults.arm("reset", OSError("cannot reopen /in/a.txt"))
    assert r.controller.make_consistent() is False
    snap = r.controller.snapshot()
    assert (snap.status, snap.resets, snap.consecutive_resets) == (RegionStatus.PROCESSING, 2, 2)
    assert r.controller.make_consistent()
    assert r.controller.snapshot().consecutive_resets == 0
    assert r.controller.snapshot().resets == 2


def test_reset_slower_than_reset_timeout_is_another_attempt(region):
    r = region(reset_timeout="1s", max_consecutive_reset_attempts=5)
    r.controller.start()
    r.ops["scan"].faults.arm("drain", OSError("listing failed"))
    r.ops["sink"].faults.arm("reset", lambda: r.clock.advance(2.0))
    assert r.controller.make_consistent() is False
    snap = r.controller.snapshot()
    assert snap.consecutive_resets == 2
    assert "over reset_timeout 1 s" in (snap.last_error or "")


def test_region_fails_after_max_consecutive_reset_attempts(region):
    r = region(max_consecutive_reset_attempts=3)
    r.controller.start()
    r.ops["sink"].faults.arm("drain", OSError("disk full"))
    refused = ConnectionError("namenode:8020: connection refused")
    r.ops["sink"].faults.arm("reset", refused, times=99)
    with pytest.raises(RegionFailedError) as failed:
        r.controller.make_consistent()
    message = str(failed.value)
    assert "3 consecutive reset attempt" in message
    assert "operator 'sink'" in message
    assert "ConnectionError" in message and "namenode:8020" in message
    assert r.controller.status is RegionStatus.FAILED
    assert r.committed() == []
    # Nobody waits forever for a failed region.
    with pytest.raises(RegionFailedError, match="connection refused"):
        r.controller.permits.acquire()
    with pytest.raises(RegionFailedError):
        r.controller.make_consistent()
    r.calls()
    assert r.controller.stop() is False
    assert r.calls() == each("close")
    assert r.controller.status is RegionStatus.FAILED


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(13, "CREATE: Permission denied: user=etl, access=WRITE", "/out"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        NotADirectoryError(20, "MKDIRS: is not a directory", "/out/a.txt/x"),
        ConfigError("sink 'sink': file template is empty"),
        permanent(FileExistsError(17, "/out/p.txt exists and is never overwritten")),
    ],
    ids=type,
)
def test_a_permanent_error_fails_the_region_at_once_without_a_reset(region, error, caplog):
    r = region(max_consecutive_reset_attempts=5, reset_backoff=30)
    r.controller.start()
    assert r.controller.make_consistent()
    r.calls()
    cuts = r.committed()
    with (
        caplog.at_level(logging.INFO, logger="region.controller"),
        pytest.raises(RegionFailedError) as failed,
    ):
        r.controller.report_failure("source", error)
    message = str(failed.value)
    assert message.startswith("consistent region stopped: operator 'source' raised ")
    assert str(error) in message
    assert "A retry would fail the same way, so none was tried" in message
    assert "resumes from its last completed cut" in message
    # No reset, no wait: the operators were not touched, and the cut stays the restart point.
    assert r.calls() == []
    assert r.controller.snapshot().resets == 0
    assert "Waiting" not in caplog.text
    assert r.committed() == cuts
    assert r.controller.status is RegionStatus.FAILED


def test_a_permanent_error_in_a_reset_ends_the_retries(region):
    r = region(max_consecutive_reset_attempts=5)
    r.controller.start()
    r.ops["sink"].faults.arm("reset", PermissionError(13, "Permission denied", "/out"), times=99)
    with pytest.raises(RegionFailedError, match=r"consistent region stopped.*Permission denied"):
        r.controller.report_failure("source", OSError(5, "read failed", "/in/a.txt"))
    # One reset was tried for the transient read error; its permanent failure ended it.
    assert r.controller.snapshot().resets == 1


def test_transient_failures_are_retried_with_a_doubling_backoff(region, caplog):
    r = region(max_consecutive_reset_attempts=4, reset_backoff=0.05)
    r.controller.start()
    r.ops["sink"].faults.arm("reset", TimeoutError("DataNode did not answer"), times=3)
    with caplog.at_level(logging.INFO, logger="region.controller"):
        r.controller.report_failure("source", ConnectionError("namenode went away"))
    waits = [m for m in caplog.messages if m.startswith("Waiting")]
    assert waits == [
        "Waiting 0.1 s before reset attempt 2",
        "Waiting 0.1 s before reset attempt 3",
        "Waiting 0.2 s before reset attempt 4",
    ]
    failed = [m for m in caplog.messages if m.startswith("Reset attempt")]
    assert [m.split(":")[0] for m in failed] == [
        "Reset attempt 1 of 4 failed",
        "Reset attempt 2 of 4 failed",
        "Reset attempt 3 of 4 failed",
    ]
    assert r.controller.status is RegionStatus.PROCESSING
    assert r.controller.snapshot().consecutive_resets == 4


def test_the_backoff_doubles_up_to_a_minute() -> None:
    settings = region_settings(reset_backoff=1.0)
    assert [settings.backoff(n) for n in range(9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert region_settings(reset_backoff=0).backoff(5) == 0


def test_a_stop_request_ends_a_backoff_at_once(region):
    r = region(max_consecutive_reset_attempts=3, reset_backoff=3600)
    r.controller.start()
    r.ops["sink"].faults.arm("reset", TimeoutError("DataNode did not answer"), times=99)
    threading.Timer(0.3, r.controller.request_stop_now).start()
    # Without the stop this would wait an hour before the second attempt.
    r.controller.report_failure("source", ConnectionError("namenode went away"))
    assert r.controller.status is RegionStatus.STOPPED


def test_repeated_processing_failures_without_a_cut_fail_the_region(region):
    r = region(max_consecutive_reset_attempts=2)
    r.controller.start()
    poison = OSError(5, "record 17 of /in/a.txt: read error")
    r.controller.report_failure("source", poison)
    r.controller.report_failure("source", poison)
    with pytest.raises(RegionFailedError, match=r"2 consecutive reset attempt.*'source'.*record"):
        r.controller.report_failure("source", poison)


def test_failure_reported_by_a_batch_in_flight_wins_over_a_waiting_cut(region):
    r = region()
    r.controller.start()
    assert r.controller.make_consistent()
    good = r.committed()
    result: list[bool] = []
    with r.controller.permits.hold():
        cutter = threading.Thread(target=lambda: result.append(r.controller.make_consistent()))
        cutter.start()
        wait_until(lambda: r.controller.status is RegionStatus.DRAINING, "the cut to wait")
        # The batch failed half-way: its partial effects must never be checkpointed.
        r.controller.report_failure("sink", OSError("write failed"))
    cutter.join()
    assert result == [False]
    assert r.committed() == good
    assert r.controller.snapshot().resets == 1  # one reset, not one per thread


# ---------------------------------------------------------------------- stop


def test_graceful_stop_takes_a_final_cut_then_closes(region):
    r = region()
    r.controller.start()
    r.calls()
    assert r.controller.stop() is True
    [final] = r.committed()
    assert r.calls() == [
        *each("drain"),
        *each(f"checkpoint {final}"),
        *each(f"on_cut_completed {final}"),
        *each("close"),
    ]
    assert r.controller.status is RegionStatus.STOPPED
    with pytest.raises(RegionStoppedError):
        r.controller.permits.acquire()
    with pytest.raises(RegionStoppedError):
        r.controller.make_consistent()


def test_immediate_stop_closes_without_a_cut_or_publishing(region):
    r = region()
    r.controller.start()
    r.calls()
    assert r.controller.stop(graceful=False) is False
    assert r.committed() == []
    assert r.calls() == each("close")
    assert r.controller.status is RegionStatus.STOPPED


def test_stop_now_requested_during_a_cut_abandons_it(region):
    r = region()
    r.controller.start()
    r.ops["source"].faults.arm("drain", lambda: r.controller.request_stop_now())
    assert r.controller.make_consistent() is False
    assert r.committed() == []
    assert r.controller.status is RegionStatus.STOPPED
    calls = r.calls()
    assert not any(c.startswith("checkpoint") for _, c in calls)
    assert calls[-3:] == each("close")


def test_failed_final_cut_resets_then_stops_without_claiming_completion(region):
    r = region()
    r.controller.start()
    assert r.controller.make_consistent()
    good = r.committed()
    r.ops["sink"].faults.arm("checkpoint", OSError("sync failed"))
    assert r.controller.stop() is False
    assert r.committed() == good
    assert r.controller.status is RegionStatus.STOPPED
    assert r.calls()[-3:] == each("close")


# ---------------------------------------------------------------------- periodic trigger


def test_periodic_trigger_cuts_repeatedly_and_stops_with_the_region(make_store, caplog):
    store = make_store()
    journal: list[tuple[str, str]] = []
    controller = RegionController(
        region_settings(trigger="periodic", period="5ms"), [Probe("only", journal)], store
    )
    with caplog.at_level(logging.INFO, logger="region.controller"):
        controller.start()
        wait_until(lambda: controller.snapshot().cuts >= 3, "three periodic cuts")
        assert controller.stop() is True
    cut_lines = [r for r in caplog.records if r.getMessage().startswith("Cut ")]
    assert len(cut_lines) == controller.snapshot().cuts
    assert "trigger: periodic" in cut_lines[0].getMessage()
    assert "trigger: stop" in cut_lines[-1].getMessage()
    assert not any(t.name == "region-trigger" for t in threading.enumerate())


# ---------------------------------------------------------------------- observability


def test_one_info_line_per_cut_and_per_reset(region, caplog):
    r = region()
    r.controller.start()
    caplog.clear()  # the recovery's line (captured when another test left the root at INFO)
    with caplog.at_level(logging.INFO, logger="region.controller"):
        assert r.controller.make_consistent()
        r.controller.report_failure("sink", OSError("boom"))
    # The controller's own lines (another test may have left the root logger at INFO, so the
    # store's and the operators' lines can be captured too).
    lines = [
        rec.getMessage()
        for rec in caplog.records
        if rec.levelno == logging.INFO and rec.name == "region.controller"
    ]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"Cut {r.committed()[-1]} completed in ")
    assert lines[1].startswith(f"Region reset to cut {r.committed()[-1]} in ")
    assert "attempt 1 of 5" in lines[1] and "operator 'sink' raised OSError: boom" in lines[1]


def test_status_table_has_two_terminal_states_and_every_state_reachable():
    terminal = {s for s, nexts in ALLOWED_TRANSITIONS.items() if not nexts}
    assert terminal == {RegionStatus.FAILED, RegionStatus.STOPPED}
    reachable = {RegionStatus.RESETTING}
    for _ in RegionStatus:
        reachable |= {n for s in reachable for n in ALLOWED_TRANSITIONS[s]}
    assert reachable == set(RegionStatus)


class _Still(Probe):
    """A participant whose state changes only when told (``moved``): an idle job's."""

    def __init__(self, name: str, journal: list[tuple[str, str]]) -> None:
        super().__init__(name, journal)
        self.moved = 0

    def checkpoint(self, cut_id: int) -> dict[str, Any]:
        return {"moved": self.moved}


def test_an_idle_region_logs_a_summary_not_a_line_per_cut(make_store, caplog):
    from region.controller import IDLE_SUMMARY_SECONDS

    clock = ManualClock(1000.0)
    still = _Still("scan", [])
    controller = RegionController(region_settings(), [still], make_store(), clock=clock)
    controller.start()

    def info_lines() -> list[str]:
        return [
            rec.getMessage()
            for rec in caplog.records
            if rec.levelno == logging.INFO and rec.name == "region.controller"
        ]

    with caplog.at_level(logging.DEBUG, logger="region.controller"):
        caplog.clear()
        assert controller.make_consistent()  # the first cut records the state: news
        assert [line.split(" in ")[0] for line in info_lines()] == ["Cut 1 completed"]
        caplog.clear()
        cuts = int(IDLE_SUMMARY_SECONDS) * 2  # one a second, two summaries' worth
        for _ in range(cuts):
            clock.advance(1.0)
            assert controller.make_consistent()
        lines = info_lines()
        assert len(lines) == 2, lines
        assert all(
            line.startswith("idle: ") and "nothing new since cut 1" in line for line in lines
        )
        assert sum(int(line.split()[1]) for line in lines) == cuts
        debug = [
            r
            for r in caplog.records
            if r.levelno == logging.DEBUG and "nothing new" in r.getMessage()
        ]
        assert len(debug) == cuts  # each cut still at DEBUG
        caplog.clear()
        still.moved += 1  # something moved: the cut is news again
        clock.advance(1.0)
        assert controller.make_consistent()
        assert [line.split(" in ")[0] for line in info_lines()] == [f"Cut {cuts + 2} completed"]
