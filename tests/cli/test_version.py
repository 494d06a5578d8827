"""``hdfs-region --version``: the installed release, from the distribution's metadata, and the
changelog has a section for it."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

from tests.cli.conftest import ROOT


def test_version_of_the_command_as_users_run_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "operators.app", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"hdfs-region {version('hdfs-region')}\n",
        "",
    )
    assert re.fullmatch(r"hdfs-region \d+\.\d+\.\d+\S*\n", done.stdout)


def test_the_changelog_has_a_section_for_the_installed_release() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(
        rf"^## {re.escape(version('hdfs-region'))} - \d{{4}}-\d\d-\d\d$", changelog, re.M
    )
    assert re.search(r"^## Unreleased$", changelog, re.M)
