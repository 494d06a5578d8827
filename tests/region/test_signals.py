"""One rule for SIGINT / SIGTERM in every runner: graceful, then immediate, then the default."""

from __future__ import annotations

import os
import signal

import pytest

from region import signals as signals_module
from region.signals import StopSignals, last_signal


def test_first_signal_is_graceful_the_second_immediate_the_third_the_default() -> None:
    calls: list[str] = []
    signals = StopSignals(lambda: calls.append("graceful"), lambda: calls.append("immediate"))
    before = signal.getsignal(signal.SIGINT)
    with signals.installed():
        os.kill(os.getpid(), signal.SIGINT)
        assert calls == ["graceful"]
        os.kill(os.getpid(), signal.SIGTERM)  # either signal counts
        assert calls == ["graceful", "immediate"]
        with pytest.raises(KeyboardInterrupt):  # the handler in place before: Python's
            os.kill(os.getpid(), signal.SIGINT)
    assert calls == ["graceful", "immediate"]
    assert signal.getsignal(signal.SIGINT) is before


def test_handlers_are_restored_when_the_run_ends_without_a_signal() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(lambda: None, lambda: None).installed():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_after_a_run_a_signal_stopped_a_late_second_signal_does_not_kill_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signals_module, "_hold", False)
    signals_module.hold_until_exit()  # as the command line does
    calls: list[str] = []
    signals = StopSignals(lambda: calls.append("graceful"), lambda: calls.append("immediate"))
    before = signal.getsignal(signal.SIGTERM)
    try:
        with signals.installed():
            os.kill(os.getpid(), signal.SIGTERM)
        assert calls == ["graceful"]
        assert last_signal() == signal.SIGTERM
        # The run ended (its stop completed); the second signal finds nothing left to stop.
        os.kill(os.getpid(), signal.SIGINT)
        assert calls == ["graceful", "immediate"]
        assert last_signal() == signal.SIGINT
        assert signal.getsignal(signal.SIGTERM) is before  # a third gets the default action
    finally:
        signal.signal(signal.SIGTERM, before)
