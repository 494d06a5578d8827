"""Errors of the local disk's writers name the file they were writing."""

from __future__ import annotations

import errno
import os

import pytest

from operators.fs.local import LocalWriter


def full_disk_writer() -> LocalWriter:
    return LocalWriter("/dev/full", os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC))


@pytest.mark.skipif(
    not os.path.exists("/dev/full"), reason="needs /dev/full (answers ENOSPC to every write)"
)
def test_a_full_disk_is_an_oserror_with_enospc_naming_the_file() -> None:
    writer = full_disk_writer()
    writer.write(b"x" * 10)  # buffered: nothing reaches the disk yet
    for call in (writer.flush, writer.sync):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.ENOSPC and type(info.value) is OSError
        assert info.value.filename == "/dev/full"
        assert "No space left on device: '/dev/full'" in str(info.value)
    with pytest.raises(OSError, match="No space left on device: '/dev/full'"):
        writer.write(b"y" * (2 << 20))  # more than the buffer: written through at once
    with pytest.raises(OSError, match="No space left on device: '/dev/full'") as closing:
        writer.close()  # the buffered rest cannot be written either
    assert closing.value.errno == errno.ENOSPC
    writer.close()  # closed anyway: a second close is a no-op


def test_an_error_keeps_its_type_and_errno_and_names_the_file() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: a write fails with EPIPE (BrokenPipeError)
    writer = LocalWriter("/data/out.txt", write_end)
    writer.write(b"x")
    with pytest.raises(BrokenPipeError) as info:
        writer.flush()
    assert info.value.errno == errno.EPIPE and info.value.filename == "/data/out.txt"
    with pytest.raises(BrokenPipeError) as closing:
        writer.close()
    assert closing.value.filename == "/data/out.txt"
