"""Replay testing for your own pipelines: random file arrivals, cuts, crashes and restarts,
checked against the sink's promise (needs the ``test`` extra: hypothesis and pytest).

::

    from hypothesis import given
    from operators.testing import PipelineReplay

    replay = PipelineReplay(transforms=[str.upper], sink={"file": "part-%FILENUM.txt"})

    @given(replay.schedules())
    def test_survives_crashes(schedule):
        replay.check(schedule)

With pytest, the ``pipeline_replay`` fixture (registered by the installed plugin) runs replays in
the session's temporary directory: ``pipeline_replay(schedule, sink=..., transforms=...)``.
"""

from operators.testing.harness import (
    T0,
    ManualClock,
    PipelineReplay,
    ReplayResult,
    SimulatedCrash,
    Workspace,
    check_pipeline,
    default_line,
)
from operators.testing.schedule import (
    PHASES,
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
    Step,
    Stop,
    Wait,
    Write,
)
from operators.testing.strategies import fault_points, faults, file_arrivals, schedules

__all__ = [
    "PHASES",
    "T0",
    "Arrival",
    "Crash",
    "Cut",
    "Fault",
    "FinishCopy",
    "FsPoint",
    "LandingModel",
    "ManualClock",
    "PhasePoint",
    "PipelineReplay",
    "ReplayResult",
    "Run",
    "Schedule",
    "ScheduleError",
    "SimulatedCrash",
    "StartCopy",
    "Step",
    "Stop",
    "Wait",
    "Workspace",
    "Write",
    "check_pipeline",
    "default_line",
    "fault_points",
    "faults",
    "file_arrivals",
    "schedules",
]
