"""The worked examples of the directory-scan design, as tests.

Timestamps are the design's (1000 … 8000), read as milliseconds after a fixed instant.
"""

from __future__ import annotations

import json

from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing import ManualClock
from tests.landing import Landing

BASE_NS = 1_700_000_000 * 1_000_000_000


def put(landing: Landing, files: list[tuple[str, int]]) -> None:
    for name, ts in files:
        landing.put(name, f"{name}-line1\n{name}-line2\n", BASE_NS + ts * 1_000_000)


def new_scan(landing: Landing, clock: ManualClock) -> HDFS2DirectoryScan:
    return HDFS2DirectoryScan(ScanSettings(directory=landing.dir), landing.fs, clock=clock)


def one_file_per_batch(scan: HDFS2DirectoryScan, n: int | None = None) -> list[str]:
    """IBM operator-driven: one file per permit (and a cut possible after each)."""
    out: list[str] = []
    while n is None or len(out) < n:
        batch = scan.next_batch(1)
        if batch is None:
            break
        assert batch.punctuation and len(batch.records) == 1
        out.append(batch.records[0].rsplit("/", 1)[-1])
    return out


def test_checkpoint_after_A_crash_while_processing_D_replays_B_D_F_G_H_I_J(
    any_landing: Landing, clock: ManualClock
) -> None:
    put(any_landing, [("E", 1000), ("A", 3000), ("C", 2000), ("B", 4000), ("D", 5000)])
    scan = new_scan(any_landing, clock)
    scan.reset_to_initial_state()
    assert one_file_per_batch(scan, 3) == ["E", "C", "A"]
    checkpoint = json.loads(json.dumps(scan.checkpoint(1)))
    assert checkpoint["key"] == {"mtime_ns": BASE_NS + 3000 * 1_000_000, "name": "A"}
    assert one_file_per_batch(scan, 2) == ["B", "D"]
    put(any_landing, [("G", 6000), ("H", 6000), ("F", 6000), ("I", 7000), ("J", 8000)])
    # Crash while processing D: a new process restores the checkpoint taken after A.
    restarted = new_scan(any_landing, clock)
    restarted.reset(checkpoint)
    # The seed's text lists {B, D, G, H, I, J}; F shares G's mtime and sorts first by name.
    assert one_file_per_batch(restarted) == ["B", "D", "F", "G", "H", "I", "J"]


def test_checkpoint_inside_the_equal_mtime_group_resumes_with_G_H_then_I_J(
    any_landing: Landing, clock: ManualClock
) -> None:
    put(any_landing, [("E", 1000), ("C", 2000), ("A", 3000), ("B", 4000), ("D", 5000)])
    put(any_landing, [("G", 6000), ("H", 6000), ("F", 6000), ("I", 7000), ("J", 8000)])
    scan = new_scan(any_landing, clock)
    scan.reset_to_initial_state()
    assert one_file_per_batch(scan, 6) == ["E", "C", "A", "B", "D", "F"]
    checkpoint = json.loads(json.dumps(scan.checkpoint(1)))  # lands inside {F, G, H}
    assert one_file_per_batch(scan, 2) == ["G", "H"]  # crash while processing H
    restarted = new_scan(any_landing, clock)
    restarted.reset(checkpoint)
    # The first design (resume after the checkpointed mtime) would have given only I, J.
    assert one_file_per_batch(restarted) == ["G", "H", "I", "J"]


def test_equal_mtime_case_through_the_file_source_replays_records_once(
    any_landing: Landing, clock: ManualClock
) -> None:
    """The same crash with the source reading the files: the checkpoint falls in the middle of
    F; the replay continues F where the cut left it, then G, H, I, J."""
    put(any_landing, [("D", 5000), ("G", 6000), ("H", 6000), ("F", 6000), ("I", 7000)])

    def pipeline() -> HDFS2FileSource:
        return HDFS2FileSource(SourceSettings(), any_landing.fs, files=new_scan(any_landing, clock))

    source = pipeline()
    source.reset_to_initial_state()
    seen = [source.next_batch(1) for _ in range(3)]
    assert [r for b in seen if b for r in b.records] == ["D-line1", "D-line2", "F-line1"]
    checkpoint = json.loads(json.dumps(source.checkpoint(1)))
    assert checkpoint["path"] == any_landing.path("F") and checkpoint["offset"] == 8
    for _ in range(3):
        source.next_batch(1)  # F-line2, G-line1, G-line2 ... then the crash
    restarted = pipeline()
    restarted.reset(checkpoint)
    replay = []
    while (batch := restarted.next_batch(10)) is not None:
        replay.extend(batch.records)
    assert replay == [f"{n}-line{i}" for n in "FGHI" for i in (1, 2)][1:]
