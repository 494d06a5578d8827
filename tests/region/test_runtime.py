"""The in-process pipeline runtime on real files: output exactly once across failures and stops."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from region.checkpoint import CheckpointStore
from region.controller import RegionStatus
from region.errors import ConfigError, RegionFailedError
from region.runtime import Pipeline, PipelineRunner, StepOutcome, run_pipeline
from region.state import Batch
from tests.region._participants import (
    FileSink,
    ListSource,
    Probe,
    expected_lines,
    region_settings,
)

RECORDS = [f"r{i}" for i in range(100)]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out.txt"


def runner_for(
    store: CheckpointStore,
    source: ListSource,
    sinks: list[FileSink],
    *,
    transforms: tuple[Callable[[Any], Any], ...] = (),
    batch_size: int = 7,
    **settings: Any,
) -> PipelineRunner:
    pipeline = Pipeline(source, transforms=transforms, sinks=sinks, batch_size=batch_size)
    return PipelineRunner(pipeline, region_settings(**settings), store)


def committed_source_index(store: CheckpointStore) -> int:
    latest = store.latest()
    assert latest is not None
    return int(latest.operators["source"]["index"])


def test_available_now_runs_transforms_into_every_sink_and_ends_with_a_final_cut(
    make_store, tmp_path: Path
):
    store = make_store()
    sinks = [
        FileSink(str(tmp_path / "a.txt"), name="a"),
        FileSink(str(tmp_path / "b.txt"), name="b"),
    ]

    def drop_every_third(record: str) -> str | None:
        return None if int(record[1:]) % 3 == 0 else record

    runner = runner_for(store, ListSource(RECORDS), sinks, transforms=(str.upper, drop_every_third))
    stats = runner.run(available_now=True)

    expected = [r.upper() for r in RECORDS if int(r[1:]) % 3]
    for name in ("a.txt", "b.txt"):
        assert (tmp_path / name).read_bytes() == expected_lines(expected)
    assert (stats.records_in, stats.records_out, stats.batches) == (100, len(expected), 15)
    assert stats.bytes_in == sum(len(r) for r in RECORDS)
    assert stats.region.status is RegionStatus.STOPPED
    assert stats.region.cuts == 1  # the final cut
    assert committed_source_index(store) == 100
    assert all(sink.closed for sink in sinks)


class LineBytesSource(ListSource):
    """Reports, as a file source does, the input bytes of each batch: UTF-8 and a newline."""

    def next_batch(self, max_records: int) -> Batch | None:
        batch = super().next_batch(max_records)
        if batch is not None:
            batch.size = sum(len(r.encode()) + 1 for r in batch.records)
        return batch


def test_bytes_in_counts_the_input_bytes_a_source_reports(make_store, tmp_path: Path):
    records = ["ü€", "plain", ""] * 10
    runner = runner_for(make_store(), LineBytesSource(records), [FileSink(str(tmp_path / "a.txt"))])
    stats = runner.run(available_now=True)
    assert stats.bytes_in == len("".join(r + "\n" for r in records).encode())
    assert stats.records_in == len(records)


def test_source_failure_resets_to_the_last_cut_and_replays_exactly_once(make_store, out: Path):
    store = make_store()
    source = ListSource(RECORDS, punctuate_every=20)
    failed: list[int] = []

    def fail_once_after_45(index: int) -> None:
        if index >= 45 and not failed:
            failed.append(index)
            source.faults.arm("next_batch", OSError("/in/a.txt: connection reset at offset 312"))

    source.on_batch = fail_once_after_45
    stats = runner_for(store, source, [FileSink(str(out))]).run(available_now=True)

    assert out.read_bytes() == expected_lines(RECORDS)
    assert stats.region.resets == 1
    assert "operator 'source' raised OSError" in (stats.region.last_error or "")
    assert stats.records_in > len(RECORDS)  # records after the cut at 40 were read twice


def test_sink_failure_in_the_middle_of_a_batch_leaves_no_torn_or_repeated_record(
    make_store, out: Path
):
    store = make_store()
    sink = FileSink(str(out), torn_writes=True)
    source = ListSource(RECORDS, punctuate_every=10)

    writes: list[int] = []

    def third_write_fails() -> None:
        writes.append(1)
        if len(writes) == 3:
            raise OSError(28, "No space left on device", "/out/part-0")

    def arm_once_in_batch_30_to_35(index: int) -> None:
        if index == 35 and not writes:
            # Two records of this batch reach the file, the third is torn half-way.
            sink.faults.arm("write", third_write_fails, times=3)

    source.on_batch = arm_once_in_batch_30_to_35
    stats = runner_for(store, source, [sink], batch_size=5).run(available_now=True)
    assert len(writes) == 3
    assert out.read_bytes() == expected_lines(RECORDS)
    assert stats.region.resets == 1


def test_a_failing_transform_is_named_and_its_batch_replayed(make_store, out: Path):
    store = make_store()
    seen: set[str] = set()

    def flaky_parse(record: str) -> str:
        if record == "r13" and record not in seen:
            seen.add(record)
            raise ValueError(f"cannot parse {record!r}")
        return record

    stats = runner_for(store, ListSource(RECORDS), [FileSink(str(out))], transforms=(flaky_parse,))
    result = stats.run(available_now=True)
    assert out.read_bytes() == expected_lines(RECORDS)
    assert "transform" in (result.region.last_error or "")
    assert "flaky_parse" in (result.region.last_error or "")


def test_a_poison_record_fails_the_region_and_closes_the_operators(make_store, out: Path):
    store = make_store()
    sink = FileSink(str(out))

    def poison(record: str) -> str:
        if record == "r13":
            raise ValueError("record 'r13': field 'price' = 'x' is not a number")
        return record

    runner = runner_for(
        store, ListSource(RECORDS), [sink], transforms=(poison,), max_consecutive_reset_attempts=3
    )
    with pytest.raises(RegionFailedError, match=r"3 consecutive reset attempt.*poison.*'price'"):
        runner.run(available_now=True)
    assert sink.closed
    assert runner.controller.status is RegionStatus.FAILED
    assert store.latest() is None  # never committed a batch containing the poison record


def test_operator_driven_region_cuts_at_each_punctuation(make_store, out: Path):
    store = make_store(retain=10)
    source = ListSource(RECORDS[:35], punctuate_every=10)
    stats = runner_for(store, source, [FileSink(str(out))], batch_size=4).run(available_now=True)
    assert stats.region.cuts == 4  # after r9, r19, r29, then the final cut
    assert len(store.list()) == 4
    assert committed_source_index(store) == 35
    assert out.read_bytes() == expected_lines(RECORDS[:35])


def test_idle_source_keeps_ticking_sinks_until_a_stop_request(make_store, out: Path):
    store = make_store()
    source = ListSource([], finite=False)
    sink = FileSink(str(out))
    runner = runner_for(store, source, [sink])
    source.on_batch = lambda _: runner.request_stop() if source.polls >= 5 else None
    stats = runner.run()
    assert sink.ticks >= 5
    assert stats.region.status is RegionStatus.STOPPED
    assert stats.region.cuts == 1  # graceful: a final cut


def test_graceful_stop_then_restart_continues_after_the_final_cut(make_store, out: Path):
    first_source = ListSource(RECORDS)
    first = runner_for(make_store(), first_source, [FileSink(str(out))])
    first_source.on_batch = lambda index: first.request_stop() if index >= 30 else None
    first.run()
    stopped_at = committed_source_index(make_store())
    assert 30 <= stopped_at < len(RECORDS)
    assert out.read_bytes() == expected_lines(RECORDS[:stopped_at])

    second = runner_for(make_store(), ListSource(RECORDS), [FileSink(str(out))])
    stats = second.run(available_now=True)
    assert out.read_bytes() == expected_lines(RECORDS)
    assert stats.records_in == len(RECORDS) - stopped_at


def test_upstream_operators_take_part_in_cuts_in_topological_order(make_store, out: Path):
    journal: list[tuple[str, str]] = []
    scan = Probe("scan", journal)
    source = ListSource(RECORDS[:10], journal=journal)
    sink = FileSink(str(out), journal=journal)
    pipeline = Pipeline(source, upstream=[scan], sinks=[sink])
    assert [op.name for op in pipeline.operators] == ["scan", "source", "sink"]
    runner = PipelineRunner(pipeline, region_settings(), make_store())
    runner.run(available_now=True)
    drains = [name for name, call in journal if call == "drain"]
    assert drains == ["scan", "source", "sink"]
    assert journal[-3:] == [("scan", "close"), ("source", "close"), ("sink", "close")]


def test_sigint_stops_gracefully_and_restores_the_previous_handler(make_store, out: Path):
    def interrupt_at_r20(record: str) -> str:
        if record == "r20":
            os.kill(os.getpid(), signal.SIGINT)
        return record

    previous = signal.getsignal(signal.SIGINT)
    pipeline = Pipeline(
        ListSource(RECORDS),
        transforms=(interrupt_at_r20,),
        sinks=[FileSink(str(out))],
        batch_size=7,
    )
    stats = run_pipeline(pipeline, region_settings(), make_store(), install_signal_handlers=True)
    assert signal.getsignal(signal.SIGINT) is previous
    assert stats.region.status is RegionStatus.STOPPED
    stopped_at = committed_source_index(make_store())
    assert 20 < stopped_at < len(RECORDS)
    assert out.read_bytes() == expected_lines(RECORDS[:stopped_at])


def test_second_sigint_stops_immediately_and_a_restart_still_delivers_exactly_once(
    make_store, out: Path
):
    def interrupt_twice(record: str) -> str:
        if record == "r20":
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return record

    source = ListSource(RECORDS, punctuate_every=10)
    pipeline = Pipeline(
        source, transforms=(interrupt_twice,), sinks=[FileSink(str(out))], batch_size=7
    )
    runner = PipelineRunner(pipeline, region_settings(), make_store(), install_signal_handlers=True)
    stats = runner.run()
    assert stats.region.status is RegionStatus.STOPPED
    assert committed_source_index(make_store()) <= 20  # no final cut past the interruption
    assert out.stat().st_size > len(expected_lines(RECORDS[:20]))  # uncommitted output left

    restarted = runner_for(make_store(), ListSource(RECORDS), [FileSink(str(out))])
    restarted.run(available_now=True)
    assert out.read_bytes() == expected_lines(RECORDS)


def test_step_reports_what_happened(make_store, out: Path):
    source = ListSource(RECORDS[:3])
    runner = runner_for(make_store(), source, [FileSink(str(out))], batch_size=2)
    runner.start()
    assert runner.step() is StepOutcome.BATCH
    source.faults.arm("next_batch", OSError("gone"))
    assert runner.step() is StepOutcome.RESET
    assert runner.step() is StepOutcome.BATCH
    assert runner.step() is StepOutcome.BATCH
    assert runner.step() is StepOutcome.IDLE
    assert runner.controller.stop() is True
    assert out.read_bytes() == expected_lines(RECORDS[:3])


def test_pipeline_settings_are_checked():
    with pytest.raises(ConfigError, match="at least one sink"):
        Pipeline(ListSource([]), sinks=[])
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1, got 0"):
        Pipeline(ListSource([]), sinks=[object()], batch_size=0)  # type: ignore[list-item]


@pytest.mark.parametrize("how", ["available_now", "graceful_stop"])
def test_sinks_finish_before_the_final_cut_so_it_covers_their_last_output(
    make_store, out: Path, how: str
):
    journal: list[tuple[str, str]] = []
    store = make_store()
    sink = FileSink(str(out), journal=journal)
    runner = runner_for(store, ListSource(RECORDS[:10], journal=journal), [sink])
    if how == "available_now":
        runner.run(available_now=True)
    else:
        runner.start()
        runner.step()
        runner.request_stop()
        runner.run()
    sink_calls = [call for name, call in journal if name == "sink"]
    finish = sink_calls.index("finish")
    assert sink_calls[finish + 1 : finish + 3] == ["drain", "checkpoint"]
    assert "on_cut_completed" in sink_calls[finish:]


def test_a_sink_failing_to_finish_resets_and_the_run_still_ends_exactly_once(make_store, out: Path):
    store = make_store()
    sink = FileSink(str(out))
    sink.faults.arm("finish", OSError("disk full while closing"))
    stats = runner_for(store, ListSource(RECORDS[:30]), [sink]).run(available_now=True)
    assert stats.region.resets == 1
    assert out.read_bytes() == expected_lines(RECORDS[:30])
    assert committed_source_index(store) == 30


def test_a_second_runner_on_the_same_checkpoint_directory_is_refused(
    tmp_path: Path, out: Path
) -> None:
    """The Python API keeps the one-job-per-directory promise too: a second runner (the
    README's Pipeline / PipelineRunner / CheckpointStore started twice) gets LockedError naming
    the holder, before it touches the output; once the first stops, the directory is free."""
    from operators.fs.local import LocalFileSystem
    from region.errors import LockedError

    fs = LocalFileSystem()
    checkpoints = str(tmp_path / "ck")
    polling = threading.Event()

    def on_batch(index: int) -> None:
        polling.set()

    first_source = ListSource(RECORDS, finite=False, on_batch=on_batch)
    first = runner_for(CheckpointStore(fs, checkpoints), first_source, [FileSink(str(out))])
    thread = threading.Thread(target=first.run, daemon=True)
    thread.start()
    assert polling.wait(30)
    second = runner_for(
        CheckpointStore(fs, checkpoints), ListSource(RECORDS), [FileSink(str(out), name="two")]
    )
    with pytest.raises(LockedError, match=r"ck is locked by .* pid \d+"):
        second.run(available_now=True)
    first.request_stop()
    thread.join(30)
    assert not thread.is_alive()
    third = runner_for(CheckpointStore(fs, checkpoints), ListSource(RECORDS), [FileSink(str(out))])
    third.run(available_now=True)
    assert out.read_text().splitlines() == RECORDS


def test_a_stop_with_nothing_new_since_the_last_cut_writes_no_checkpoint(make_store, out: Path):
    """A restart that finds nothing to do stops without a new checkpoint (on HDFS each costs a
    close the NameNode makes wait): the last cut already records the same. Nothing is written,
    so a crash in it leaves that cut, and the next run goes on from it exactly once."""
    runner_for(make_store(), ListSource(RECORDS[:50]), [FileSink(str(out))]).run(available_now=True)
    last = make_store().latest()
    assert last is not None

    idle = runner_for(make_store(), ListSource(RECORDS[:50]), [FileSink(str(out))])
    stats = idle.run(available_now=True)
    assert stats.region.status is RegionStatus.STOPPED
    again = make_store().latest()
    assert again is not None and again.cut_id == last.cut_id  # no checkpoint written
    assert out.read_bytes() == expected_lines(RECORDS[:50])

    runner_for(make_store(), ListSource(RECORDS), [FileSink(str(out))]).run(available_now=True)
    assert out.read_bytes() == expected_lines(RECORDS)
    newest = make_store().latest()
    assert newest is not None and newest.cut_id > last.cut_id
