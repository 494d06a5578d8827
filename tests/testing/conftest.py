"""Fixtures of the replay-toolkit tests."""

from __future__ import annotations

import pytest

from operators.testing import Workspace

from ._workspace import fast_workspace


@pytest.fixture(scope="session")
def workspace() -> Workspace:
    return fast_workspace()
