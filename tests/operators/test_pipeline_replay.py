"""Property tests of scan -> source -> sink in a consistent region, written with the replay
toolkit (operators.testing): random file arrivals (many equal mtimes, late files, copies in
flight), random cuts, crashes anywhere (between steps, mid-file, mid-write, inside every phase of
a cut, during recovery) and in-process failures. exactly_once: the published output is the
transformed input exactly once, in order per input file, and no reader ever sees a duplicate;
at_least_once: it covers the input. The sink's configuration cells (format, limits, publish,
filesystems without truncate) are in test_sink_replay.py."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from operators.testing import PipelineReplay, Schedule, Workspace
from tests.conftest import FsHandle


def upper(record: str) -> str:
    return record.upper()


def drop_every_third(record: str) -> str | None:
    return None if record.endswith(("0", "3")) else record


LINES_BY_TUPLES = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "tuples_per_file": 3},
    source={"read_chunk": 5},
    transforms=[upper, drop_every_third],
)


@given(LINES_BY_TUPLES.schedules())
def test_exactly_once_lines_rolling_by_tuples_atomic_publish(schedule: Schedule) -> None:
    LINES_BY_TUPLES.check(schedule)


VISIBLE_BY_BYTES = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "bytes_per_file": 20, "publish": "visible"},
    source={"read_chunk": 3},
    transforms=[upper],
)


@given(VISIBLE_BY_BYTES.schedules())
def test_exactly_once_lines_visible_publish_rolling_by_bytes(schedule: Schedule) -> None:
    VISIBLE_BY_BYTES.check(schedule)


BINARY_BLOCKS = PipelineReplay(
    sink={"file": "blocks/%FILENUM.bin", "format": "binary", "tuples_per_file": 3},
    source={"format": "binary", "block_size": 4, "read_chunk": 3},
    transforms=[bytes.upper],
)


@given(BINARY_BLOCKS.schedules())
def test_exactly_once_binary_blocks(schedule: Schedule) -> None:
    BINARY_BLOCKS.check(schedule)


AT_LEAST_ONCE = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "delivery": "at_least_once", "close_on_punct": True},
    transforms=[upper],
)


@given(AT_LEAST_ONCE.schedules())  # no torn writes for at_least_once: PipelineReplay.schedules
def test_at_least_once_covers_the_input(schedule: Schedule) -> None:
    AT_LEAST_ONCE.check(schedule)


LATE_FILES = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "tuples_per_file": 4},
    scan={"late_window": 2},
    source={"read_chunk": 1},
)


@given(LATE_FILES.schedules())
def test_late_files_within_the_window_exactly_once(schedule: Schedule) -> None:
    LATE_FILES.check(schedule)


LINE_BLOCKS = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "bytes_per_file": 30},
    source={"read_chunk": 16},
    batch_size=8,
)


@given(LINE_BLOCKS.schedules())
def test_exactly_once_lines_as_blocks_rolling_inside_a_block(schedule: Schedule) -> None:
    """No transform: lines go to the sink as blocks of bytes, as the engine passes them; a
    file's byte limit falls inside blocks, and crashes and cuts anywhere keep every line once."""
    LINE_BLOCKS.check(schedule)


OPERATOR_DRIVEN = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "close_on_punct": True},
    trigger="operator_driven",
    batch_size=2,
)


@given(OPERATOR_DRIVEN.schedules())
def test_operator_driven_region_cuts_after_each_file(schedule: Schedule) -> None:
    OPERATOR_DRIVEN.check(schedule)


BY_TIME = PipelineReplay(
    sink={"file": "%TIME-%FILENUM.txt", "time_per_file": 4, "time_format": "yyyyMMddHHmmss"},
    scan={"min_file_age": 1},
)


@given(BY_TIME.schedules())
def test_time_rolling_and_minimum_file_age(schedule: Schedule) -> None:
    BY_TIME.check(schedule)


# -- on every filesystem backend -------------------------------------------------------------


def backend_workspace(handle: FsHandle) -> Workspace:
    return Workspace(handle.fs, handle.root, handle.set_mtime)


ON_EVERY_BACKEND = dict(
    sink={"file": "part-%FILENUM.txt", "tuples_per_file": 3, "publish": "visible"},
    scan={"late_window": 1},
    transforms=[upper],
)


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=PipelineReplay(**ON_EVERY_BACKEND).schedules(max_steps=10))
def test_exactly_once_on_every_backend(any_fs: FsHandle, schedule: Schedule) -> None:
    PipelineReplay(**ON_EVERY_BACKEND, workspace=backend_workspace(any_fs)).check(schedule)


def test_a_marker_whose_close_fails_is_made_again_on_every_backend(any_fs: FsHandle) -> None:
    """Found by the property above, once in many runs: with ``publish = "visible"`` the
    marker's close fails, and the retry creates the marker again. A real writer's failed close
    still releases this process's claim on the path; the stand-in for the fault kept it, and
    the retry was refused ("another writer of this process holds the file open") until the
    region gave up."""
    PipelineReplay(**ON_EVERY_BACKEND, workspace=backend_workspace(any_fs)).check(
        "write a.txt (1 line, no final newline, mtime t0); "
        "run 1 batch, failing before the 1st close in the output; run 1 batch; run 1 batch"
    )


# -- known problems --------------------------------------------------------------------------


def test_at_least_once_survives_a_crash_in_the_middle_of_a_write() -> None:
    replay = PipelineReplay(
        sink={"file": "part-%FILENUM.txt", "delivery": "at_least_once"},
        batch_size=3,  # half of a 3-record write ends inside a record
    )
    replay.check(
        "write a.txt (6 lines, mtime t0); run 1 batch; cut; "
        "run 1 batch, crashing in the middle of the 1st write in the output"
    )
