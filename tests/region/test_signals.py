"""One rule for SIGINT / SIGTERM in every runner: graceful, then immediate, then the default."""

from __future__ import annotations

import os
import signal

import pytest

from region.signals import StopSignals, held_until_exit, last_signal


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


def test_after_a_run_a_signal_stopped_a_late_second_signal_does_not_kill_the_process() -> None:
    calls: list[str] = []
    signals = StopSignals(lambda: calls.append("graceful"), lambda: calls.append("immediate"))
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with held_until_exit():  # as the command line runs a job
            with signals.installed():
                os.kill(os.getpid(), signal.SIGTERM)
            assert calls == ["graceful"]
            assert last_signal() == signal.SIGTERM
            # The run ended (its stop completed); the second signal finds nothing to stop.
            os.kill(os.getpid(), signal.SIGINT)
            assert calls == ["graceful", "immediate"]
            assert last_signal() == signal.SIGINT
            assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
        # The job is over: the process only exits, and no signal ends it as if it crashed.
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_without_the_hold_the_handlers_are_restored_after_a_stop_too() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(lambda: None, lambda: None).installed():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before
