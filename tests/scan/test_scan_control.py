"""The scan's control input: the same directory lists again at once, and switch requests from
the control file (``hdfs-region switch``) are applied under a permit, recorded in the state,
applied again after a reset took them back, and refused outside the roots."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.scan.control import ControlFile, request_switch
from operators.testing import ManualClock

FS = LocalFileSystem()


def put(directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("x\n")


def names(scan: HDFS2DirectoryScan) -> list[str]:
    out = []
    while (status := scan.next_file()) is not None:
        out.append(status.name)
    return out


def make_scan(
    tmp_path: Path, clock: ManualClock, **kw: object
) -> tuple[HDFS2DirectoryScan, ControlFile]:
    control = ControlFile(FS, str(tmp_path / "checkpoints" / "control.json"), poll=1.0)
    values: dict[str, object] = {"directory": str(tmp_path / "a"), "sleep_time": 60, **kw}
    scan = HDFS2DirectoryScan(ScanSettings.model_validate(values), FS, clock=clock, control=control)
    scan.reset_to_initial_state()
    return scan, control


def test_the_same_directory_again_lists_it_at_once(tmp_path: Path) -> None:
    clock = ManualClock(2_000_000_000.0)
    put(tmp_path / "a", "1.txt")
    scan = HDFS2DirectoryScan(
        ScanSettings(directory=str(tmp_path / "a"), sleep_time=60), FS, clock=clock
    )
    scan.reset_to_initial_state()
    assert names(scan) == ["1.txt"]
    put(tmp_path / "a", "2.txt")
    assert names(scan) == []  # sleep_time (60 s) has not passed
    scan.set_directory(str(tmp_path / "a"))
    assert names(scan) == ["2.txt"]  # listed again now, and nothing read twice
    assert names(scan) == []


def test_a_switch_request_is_applied_recorded_and_kept_across_a_restart(tmp_path: Path) -> None:
    clock = ManualClock(2_000_000_000.0)
    put(tmp_path / "a", "1.txt")
    put(tmp_path / "b", "2.txt")
    scan, control = make_scan(tmp_path, clock)
    assert names(scan) == ["1.txt"]
    (tmp_path / "checkpoints").mkdir()
    request_switch(FS, control.path, str(tmp_path / "b"))
    assert names(scan) == []  # read at most every poll seconds
    clock.advance(1)
    assert names(scan) == ["2.txt"]
    state = json.loads(json.dumps(scan.checkpoint(1)))
    assert state["directory"] == str(tmp_path / "b") and state["switch"] > 0
    # A restart from that cut watches b and does not apply the request again.
    again, _ = make_scan(tmp_path, clock)
    again.reset(state)
    put(tmp_path / "b", "3.txt")
    assert names(again) == ["3.txt"] and again.directory == str(tmp_path / "b")


def test_a_switch_taken_back_by_a_reset_is_applied_again(tmp_path: Path) -> None:
    clock = ManualClock(2_000_000_000.0)
    put(tmp_path / "a", "1.txt")
    put(tmp_path / "b", "2.txt")
    scan, control = make_scan(tmp_path, clock)
    before = json.loads(json.dumps(scan.checkpoint(1)))  # the cut before the switch
    (tmp_path / "checkpoints").mkdir()
    request_switch(FS, control.path, str(tmp_path / "b"))
    assert names(scan) == ["2.txt"]
    scan.reset(before)  # a failure: back to the cut, where a was watched
    assert names(scan) == ["2.txt"] and scan.directory == str(tmp_path / "b")


def test_a_request_outside_the_roots_is_refused_once_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(2_000_000_000.0)
    put(tmp_path / "a", "1.txt")
    put(tmp_path / "elsewhere", "secret.txt")
    scan, control = make_scan(tmp_path, clock, roots=(str(tmp_path / "a"),))
    (tmp_path / "checkpoints").mkdir()
    request_switch(FS, control.path, str(tmp_path / "elsewhere"))
    with caplog.at_level(logging.ERROR, logger="operators.scan.operator"):
        assert names(scan) == ["1.txt"]
        clock.advance(5)
        assert names(scan) == []
    refused = [r for r in caplog.records if "switch request" in r.getMessage()]
    assert len(refused) == 1 and "outside the allowed roots" in refused[0].getMessage()
    assert scan.directory == str(tmp_path / "a")


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.sampled_from(["switch-a", "switch-b", "land", "emit", "cut", "reset", "tick"]),
        max_size=25,
    )
)
def test_after_any_cuts_and_resets_the_scan_watches_the_last_requested_directory(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    """Whatever cuts and resets come between, once the control file is read the scan watches
    the directory of the newest request, and between two switches every file is emitted once
    per cut (a replay after a reset emits again only what the cut does not cover)."""
    root = tmp_path_factory.mktemp("switch")
    clock = ManualClock(2_000_000_000.0)
    (root / "a").mkdir()
    (root / "b").mkdir()
    scan, control = make_scan(root, clock, sleep_time=0)
    (root / "checkpoints").mkdir()
    state = json.loads(json.dumps(scan.checkpoint(0)))
    count = 0
    requested = str(root / "a")
    emitted: list[str] = []  # since the last switch
    at_cut: list[str] | None = []  # what the cut covers of it (None: the cut is older)
    for step in steps:
        if step.startswith("switch"):
            new = str(root / step[-1])
            request_switch(FS, control.path, new)
            clock.advance(1)
            if new != requested:  # another directory is read from scratch
                requested, emitted, at_cut = new, [], None
        elif step == "land":
            count += 1
            put(root / "a", f"a{count}.txt")
            put(root / "b", f"b{count}.txt")
        elif step == "emit":
            got = names(scan)
            assert scan.directory == requested
            emitted += got
            assert len(emitted) == len(set(emitted)), f"emitted twice: {emitted}"
        elif step == "cut":
            state = json.loads(json.dumps(scan.checkpoint(1)))
            at_cut = list(emitted)
        elif step == "reset":
            scan.reset(state)  # a cut before the switch: the switch is applied again
            emitted = list(at_cut) if at_cut is not None else []
        else:
            clock.advance(1)
    names(scan)
    assert scan.directory == requested
