"""``hdfs-region copy``: exit codes, and the command killed with SIGKILL mid-copy, before its
rename and before it deletes its source, then run again: never a partial destination, the
destination byte for byte the source, the source deleted only after."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operators.copy.transfer import is_temporary_of
from tests.cli.conftest import cli, kill_at

BIG = 24 << 20  # several chunks of 4 MiB


def _put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_copy_prints_ibm_result_and_exits_0(tmp_path: Path) -> None:
    src = _put(tmp_path / "a.txt", b"hello\n")
    # A named pipe beside the destination is none of the copy's business: no warning.
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "someone-elses.fifo")
    done = cli("copy", str(src), str(tmp_path / "out") + "/")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    dst = tmp_path / "out" / "a.txt"
    # IBM's sentence, ending with the URI (IBM's result tuple keeps its " .").
    assert done.stdout == f"6 bytes successfully copied from file://{src} to file://{dst}\n"
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
    assert same.returncode == 3 and "same file" in same.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[filesystem]\nuri = "webhdfs://nn:9870"\nretries = "many"\n[sink]\nx = 1\n')
    config = cli("copy", str(src), "webhdfs://nn:9870/x", "--config", str(bad))
    assert config.returncode == 2
    assert "[filesystem] retries" in config.stderr and "many" not in config.stderr
    absent = cli("copy", str(src), "x", "--config", str(tmp_path / "absent.toml"))
    assert absent.returncode == 2 and "absent.toml" in absent.stderr


@pytest.mark.parametrize("alias", ["linked directory", "linked file"])
def test_the_source_under_another_name_exits_3_and_is_kept(tmp_path: Path, alias: str) -> None:
    data = b"".join(b"line %d\n" % i for i in range(1000))
    src = _put(tmp_path / "real" / "b.txt", data)
    if alias == "linked directory":
        (tmp_path / "linkdir").symlink_to(tmp_path / "real")
        dst = str(tmp_path / "linkdir") + "/"
    else:
        (tmp_path / "link.txt").symlink_to(src)
        dst = str(tmp_path / "link.txt")
    done = cli("copy", str(src), dst, "--delete-source")
    assert done.returncode == 3, done.stderr
    assert "SameFileError" in done.stderr and "same file" in done.stderr and done.stdout == ""
    assert src.read_bytes() == data


def test_a_missing_source_with_a_file_at_the_destination_exits_4(tmp_path: Path) -> None:
    _put(tmp_path / "out" / "a.txt", b"yesterday\n")
    done = cli("copy", str(tmp_path / "a.txt"), str(tmp_path / "out") + "/", "--delete-source")
    assert done.returncode == 4, done.stderr
    assert "not copied" in done.stderr and f"file://{tmp_path}/a.txt" in done.stderr
    assert done.stdout == "" and (tmp_path / "out" / "a.txt").read_bytes() == b"yesterday\n"
    # Without a file there it is a missing source as before.
    gone = cli("copy", str(tmp_path / "b.txt"), str(tmp_path / "out") + "/", "--delete-source")
    assert gone.returncode == 1 and "FileNotFoundError" in gone.stderr


def test_the_printed_uris_name_the_copied_files(tmp_path: Path) -> None:
    """``a%20b.txt`` beside ``a b.txt``: each printed URI, given back, copies its own file."""
    _put(tmp_path / "in" / "a%20b.txt", b"percent\n")
    _put(tmp_path / "in" / "a b.txt", b"space\n")
    for name, data in (("a%20b.txt", b"percent\n"), ("a b.txt", b"space\n")):
        done = cli("copy", str(tmp_path / "in" / name), str(tmp_path / "out") + "/")
        assert done.returncode == 0, done.stderr
        printed_src, printed_dst = (
            done.stdout.split(" from ", 1)[1].removesuffix("\n").split(" to ")
        )
        back = tmp_path / "back" / name
        again = cli("copy", printed_dst, str(back))
        assert again.returncode == 0, again.stderr
        assert back.read_bytes() == data
        assert again.stdout.split(" from ", 1)[1].startswith(printed_dst + " to ")
        assert cli("copy", printed_src, str(back)).returncode == 0  # the same content: done


def test_a_file_name_that_is_not_utf8_is_copied_and_its_source_deleted(tmp_path: Path) -> None:
    """A Latin-1 name (bytes that are not UTF-8) is a file like any other: copied, its source
    deleted, and the printed URI names the copy."""
    name = os.fsdecode(b"caf\xe9.txt")
    src = _put(tmp_path / "in" / name, b"latin-1 named\n")
    done = cli("copy", str(src), str(tmp_path / "out") + "/", "--delete-source")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / name).read_bytes() == b"latin-1 named\n"
    assert not src.exists()
    printed_dst = done.stdout.split(" to ", 1)[1].removesuffix("\n")
    assert "caf%E9.txt" in printed_dst
    again = cli("copy", printed_dst, str(tmp_path / "back") + "/")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "back" / name).read_bytes() == b"latin-1 named\n"


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def _kill_at(point: str, tmp_path: Path, *args: str) -> None:
    """Run ``hdfs-region copy ARGS`` stopped at ``point`` and SIGKILL it there."""
    kill_at(point, tmp_path / "faults", "copy", *args)


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
    # And once more: the source is gone and the copy that deleted it has finished: a file at
    # the destination does not make a missing source a success.
    repeat = cli("copy", str(src), str(out) + "/", "--delete-source")
    assert repeat.returncode == 4 and "not copied" in repeat.stderr
    assert repeat.stdout == "" and (out / "f.bin").read_bytes() == data


@pytest.mark.slow
def test_sigkill_after_deleting_the_source_then_again(tmp_path: Path) -> None:
    data = os.urandom(BIG // 4)
    src = _put(tmp_path / "in" / "f.bin", data)
    out = tmp_path / "out"
    _kill_at("copy_after_source_deleted", tmp_path, str(src), str(out) + "/", "--delete-source")
    assert not src.exists() and (out / "f.bin").read_bytes() == data
    # The marker left beside the destination proves this copy wrote it: success, marker gone.
    done = cli("copy", str(src), str(out) + "/", "--delete-source")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{len(data)} bytes successfully copied from file://{src} to " + (
        f"file://{out}/f.bin\n"
    )
    assert [p.name for p in out.iterdir()] == ["f.bin"]


def test_help_lists_copy() -> None:
    assert "copy one file between the local disk and HDFS" in cli("--help").stdout
