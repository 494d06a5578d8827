"""Schedules print as words and read back from them; the strategies generate only arrivals the
scan promises to read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.testing import (
    Arrival,
    Crash,
    Cut,
    Fault,
    FinishCopy,
    FsPoint,
    LandingModel,
    PhasePoint,
    Run,
    Schedule,
    ScheduleError,
    StartCopy,
    Stop,
    Wait,
    Write,
    file_arrivals,
    schedules,
)


@given(st.sampled_from([0.0, 0.5, 3.0]).flatmap(lambda w: schedules(late_window=w)))
def test_every_generated_schedule_reads_back_from_its_words(schedule: Schedule) -> None:
    assert Schedule.from_words(schedule.words) == schedule
    assert Schedule.from_words(str(schedule)) == schedule  # the numbered, annotated form
    assert eval(repr(schedule), {"Schedule": Schedule}) == schedule


def test_words_of_each_kind_of_step() -> None:
    schedule = Schedule.of(
        Write(
            (Arrival("b.txt", 3, 2000), Arrival("a.txt", 1, 2000, crlf=True, final_newline=False))
        ),
        StartCopy(Arrival("c.txt", 2)),
        Run(2),
        Cut(Fault(PhasePoint("after the checkpoint is written"))),
        Run(1, Fault(FsPoint("write", "output", 2, "during"))),
        Cut(Fault(FsPoint("rename", "checkpoints", 1, "after"), crash=False)),
        FinishCopy("c.txt", 1500),
        Crash(Fault(FsPoint("truncate"))),
        Wait(5),
        Stop(),
    )
    assert schedule.lines() == [
        "1. write b.txt (3 lines, mtime t0+2s), a.txt (1 line, crlf, no final newline, "
        "mtime t0+2s)",
        "2. start copying c.txt (2 lines)",
        "3. run 2 batches",
        "4. cut, crashing after the checkpoint is written",
        "5. run 1 batch, crashing in the middle of the 2nd write in the output "
        "(half of it written)",
        "6. cut, failing after the 1st rename in the checkpoints",
        "7. finish copying c.txt (mtime t0+1.5s) [late: the newest file is at t0+2s]",
        "8. crash, recovery crashing before the 1st truncate in the output",
        "9. wait 5s",
        "10. stop gracefully",
    ]
    assert Schedule.from_words(str(schedule)) == schedule


@pytest.mark.parametrize(
    ("words", "complaint"),
    [
        ("write a.txt", "expected 'write a.txt (3 lines, mtime t0)'"),
        ("write a.txt (3 lines)", "give the mtime of a.txt"),
        ("write .a (1 line, mtime t0)", "file name '.a'"),
        ("write a (1 line, mtime t0); write a (2 lines, mtime t0+1s)", "a was already written"),
        ("finish copying a (mtime t0)", "a is not being copied"),
        (
            "run 2 batches, crashing before the 1st teleport in the output",
            "step 1 (run 2 batches, crashing before the 1st teleport in the output): "
            "filesystem call 'teleport' is not one of",
        ),
        ("cut, crashing in the middle of the 1st rename in the output", "only a write"),
        ("cut, crashing somewhere", "'somewhere' is not a place"),
        ("jump", "step 1: 'jump' is not a step"),
        ("write a (1 line, mtime yesterday)", "mtime 'yesterday'"),
    ],
)
def test_bad_words_say_what_is_wrong(words: str, complaint: str) -> None:
    with pytest.raises(ScheduleError) as info:
        Schedule.from_words(words)
    assert complaint in str(info.value)


def test_the_landing_model_promises_ties_after_the_cursor_and_new_late_names() -> None:
    model = LandingModel(late_window=0)
    assert model.appear([("b", 1000), ("a", 1000)]) == [True, True]  # all visible at once
    assert model.promised("c", 1000)  # a tie that sorts after b
    assert not model.promised("a0", 1000)  # a tie that sorts before b: may be skipped
    assert not model.promised("z", 999)  # older: may be skipped
    windowed = LandingModel(late_window=2)
    windowed.appear([("m", 10_000)])
    assert windowed.promised("a", 8_000)  # within the window
    assert windowed.promised("b", 1)  # beyond it: a new name is read all the same
    assert not windowed.promised("m", 10_000)  # a name already visible is not new


@given(
    st.sampled_from([0.0, 0.25, 2.0]).flatmap(
        lambda w: st.tuples(st.just(w), file_arrivals(late_window=w))
    )
)
def test_generated_arrivals_are_all_promised(case: tuple[float, list[Write]]) -> None:
    window, writes = case
    model = LandingModel(window)
    for write in writes:
        assert all(model.appear([(f.name, f.mtime_ms) for f in write.files])), write
