"""Fixtures of the replay-toolkit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from operators.testing import Workspace

from ._workspace import fast_workspace


@pytest.fixture(scope="session")
def workspace() -> Iterator[Workspace]:
    space = fast_workspace()
    yield space
    space.remove(space.root)
