"""The fault injector's filesystem behaves like a process that dies or loses an answer: what it
opened is closed, so the next process (or the retry) can open the same path."""

from __future__ import annotations

import pytest

from operators.testing import SimulatedCrash
from operators.testing.injection import Injector, InstrumentedFS
from operators.testing.schedule import Fault, FsPoint
from tests.conftest import FsHandle


class _Process:
    def __init__(self, fs: InstrumentedFS) -> None:
        self.dead = False
        self.fs = fs

    def die(self, where: str) -> None:
        self.dead = True
        self.fs.die()


@pytest.mark.parametrize("crash", [True, False], ids=["crashing", "failing"])
def test_a_fault_right_after_an_open_leaves_the_path_free(any_fs: FsHandle, crash: bool) -> None:
    out = any_fs.path("out")
    any_fs.fs.mkdirs(out)
    injector = Injector()
    fs = InstrumentedFS(any_fs.fs, injector, {"output": out})
    injector.process = _Process(fs)
    injector.arm(Fault(FsPoint("create", "output", 1, "after"), crash=crash))
    path = any_fs.path("out", "part-0.txt")

    # The error is kept, as the region keeps a failure's cause: its traceback must not keep the
    # opened writer (and the writer's claim on the path) alive.
    with pytest.raises((SimulatedCrash, OSError)) as raised:
        fs.create(path)
    assert raised.value is not None

    writer = any_fs.fs.append(path)  # the next writer of the path, in this interpreter
    writer.write(b"x\n")
    writer.close()
    assert any_fs.fs.read(path) == b"x\n"
