"""The integration tier is what tests/conftest.py says it is: every test it names exists."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import HEAVY_MODULES, INTEGRATION_TESTS, LONG_MODULES, ROOT


def test_every_test_the_tier_names_exists_and_is_in_the_tier() -> None:
    """A renamed test must not drop out of the tier (and back into the default run) silently."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "integration"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = set(done.stdout.splitlines())
    missing = sorted(INTEGRATION_TESTS - collected)
    assert not missing, f"INTEGRATION_TESTS names tests the tier does not collect: {missing}"


def test_the_modules_the_scheduling_names_exist() -> None:
    """A renamed module would silently lose its place in the order of the work."""
    missing = [m for m in (*HEAVY_MODULES, *LONG_MODULES) if not (ROOT / m).is_file()]
    assert not missing, missing
    assert not set(HEAVY_MODULES) & set(LONG_MODULES)  # the heavy unit goes first anyway
