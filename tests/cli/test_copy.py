"""``hdfs-region copy``: exit codes, and the command killed with SIGKILL mid-copy, before its
rename and before it deletes its source, then run again: never a partial destination, the
destination byte for byte the source, the source deleted only after."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from operators.copy.transfer import FAULT_ENV, is_temporary_of
from tests.cli.conftest import cli, start_cli, wait_for

BIG = 24 << 20  # several chunks of 4 MiB


def _put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_copy_prints_ibm_result_and_exits_0(tmp_path: Path) -> None:
    src = _put(tmp_path / "a.txt", b"hello\n")
    done = cli("copy", str(src), str(tmp_path / "out") + "/")
    assert done.returncode == 0, done.stderr
    dst = tmp_path / "out" / "a.txt"
    assert done.stdout == f"6 bytes successfully copied from file://{src} to file://{dst} .\n"
    assert dst.read_bytes() == b"hello\n"
    again = cli("copy", str(src), str(dst), "--delete-source")
    assert again.returncode == 0, again.stderr
    assert not src.exists() and dst.read_bytes() == b"hello\n"


def test_exit_codes(tmp_path: Path) -> None:
    src = _put(tmp_path / "a.txt", b"new\n")
    _put(tmp_path / "b.txt", b"old\n")
    exists = cli("copy", str(src), str(tmp_path / "b.txt"))
    assert exists.returncode == 1
    assert "FileExistsError" in exists.stderr and f"file://{tmp_path}/b.txt" in exists.stderr
    assert (tmp_path / "b.txt").read_bytes() == b"old\n"
    assert cli("copy", str(src), str(tmp_path / "b.txt"), "--overwrite").returncode == 0
    assert (tmp_path / "b.txt").read_bytes() == b"new\n"
    missing = cli("copy", str(tmp_path / "nope"), str(tmp_path / "x"))
    assert missing.returncode == 1 and "FileNotFoundError" in missing.stderr
    assert "nope" in missing.stderr
    scheme = cli("copy", str(src), "ftp://host/x")
    assert scheme.returncode == 2 and "unknown filesystem scheme 'ftp'" in scheme.stderr
    same = cli("copy", str(src), str(src))
    assert same.returncode == 2 and "same file" in same.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[filesystem]\nuri = "webhdfs://nn:9870"\nretries = "many"\n[sink]\nx = 1\n')
    config = cli("copy", str(src), "webhdfs://nn:9870/x", "--config", str(bad))
    assert config.returncode == 2
    assert "[filesystem] retries" in config.stderr and "many" not in config.stderr
    absent = cli("copy", str(src), "x", "--config", str(tmp_path / "absent.toml"))
    assert absent.returncode == 2 and "absent.toml" in absent.stderr


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def _kill_at(point: str, tmp_path: Path, *args: str) -> None:
    """Run ``hdfs-region copy ARGS`` stopped at ``point`` and SIGKILL it there."""
    faults = tmp_path / "faults"
    faults.mkdir(exist_ok=True)
    env = {FAULT_ENV: point, "HDFS_REGION_FAULT_DIR": str(faults)}
    proc = start_cli("copy", *args, cwd=None, **env)
    try:
        wait_for(lambda: (faults / point).exists(), 120, f"the copy to reach {point}", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    (faults / point).unlink()


@pytest.mark.slow
@pytest.mark.parametrize("delete_source", [False, True])
def test_sigkill_mid_copy_then_again(tmp_path: Path, delete_source: bool) -> None:
    data = os.urandom(BIG)
    src = _put(tmp_path / "in" / "big.bin", data)
    out = tmp_path / "out"
    flags = ["--delete-source"] if delete_source else []
    _kill_at("copy_write", tmp_path, str(src), str(out) + "/", *flags)
    # Killed mid-copy: a partial hidden temporary, no destination, the source untouched.
    assert _visible(out) == []
    (temp,) = out.iterdir()
    assert is_temporary_of(temp.name, "big.bin") and 0 < temp.stat().st_size < BIG
    assert src.read_bytes() == data
    done = cli("copy", str(src), str(out) + "/", *flags)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == ["big.bin"]  # the leftover is gone
    assert (out / "big.bin").read_bytes() == data
    assert src.exists() != delete_source


@pytest.mark.slow
def test_sigkill_before_rename_then_again(tmp_path: Path) -> None:
    data = os.urandom(BIG // 4)
    src = _put(tmp_path / "in" / "f.bin", data)
    out = tmp_path / "out"
    _kill_at("copy_before_rename", tmp_path, str(src), str(out / "f.bin"), "--delete-source")
    (temp,) = out.iterdir()
    assert temp.name.startswith(".") and temp.stat().st_size == len(data)
    assert _visible(out) == [] and src.read_bytes() == data
    done = cli("copy", str(src), str(out / "f.bin"), "--delete-source")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == ["f.bin"]
    assert (out / "f.bin").read_bytes() == data and not src.exists()


@pytest.mark.slow
def test_sigkill_between_rename_and_source_deletion_then_again(tmp_path: Path) -> None:
    data = os.urandom(BIG // 4)
    src = _put(tmp_path / "in" / "f.bin", data)
    out = tmp_path / "out"
    _kill_at("copy_after_rename", tmp_path, str(src), str(out) + "/", "--delete-source")
    # The destination is whole and the source is still there: deleted only after.
    assert [p.name for p in out.iterdir()] == ["f.bin"]
    assert (out / "f.bin").read_bytes() == data and src.read_bytes() == data
    done = cli("copy", str(src), str(out) + "/", "--delete-source")
    assert done.returncode == 0, done.stderr
    assert "successfully copied" in done.stdout
    assert (out / "f.bin").read_bytes() == data and not src.exists()
    # And once more: the source is gone, its destination there: a finished copy.
    repeat = cli("copy", str(src), str(out) + "/", "--delete-source")
    assert repeat.returncode == 0, repeat.stderr


def test_help_lists_copy() -> None:
    assert "copy one file between the local disk and HDFS" in cli("--help").stdout
