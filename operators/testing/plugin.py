"""pytest plugin (installed as the ``hdfs_region`` entry point): the ``pipeline_replay`` fixture.

::

    @given(schedule=schedules())
    def test_upper(pipeline_replay, schedule):
        pipeline_replay(schedule, transforms=[str.upper], sink={"file": "part-%FILENUM.txt"})

The fixture is session-scoped, so it is safe with ``@given``: every call runs in a fresh
temporary directory (in memory when ``/dev/shm`` exists), removed afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from operators.testing.harness import ReplayResult
    from operators.testing.schedule import Schedule

__all__ = ["ReplayFixture", "pipeline_replay"]


class ReplayFixture:
    """``fixture(schedule, sink=..., transforms=..., **options)`` checks one schedule;
    the options are those of :class:`operators.testing.PipelineReplay`."""

    def __call__(self, schedule: Schedule | str, **options: Any) -> ReplayResult:
        from operators.testing.harness import PipelineReplay

        return PipelineReplay(**options).check(schedule)


@pytest.fixture(scope="session")
def pipeline_replay() -> ReplayFixture:
    """Checks a pipeline under a schedule; see :class:`ReplayFixture`."""
    return ReplayFixture()
