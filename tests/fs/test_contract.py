"""The filesystem contract (region.fs), run on every backend through ``any_fs``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from region.fs import EntryLister, FileSystem
from tests.conftest import FsHandle


def writer(fs: FileSystem, path: str, data: bytes, *, overwrite: bool = False) -> None:
    w = fs.create(path, overwrite=overwrite)
    try:
        w.write(data)
    finally:
        w.close()


def test_create_writes_a_new_file_and_makes_its_parents(any_fs: FsHandle) -> None:
    path = any_fs.path("a", "b", "f.txt")
    w = any_fs.fs.create(path)
    assert w.path == path
    assert any_fs.fs.exists(path)  # the file exists as soon as it is created
    w.write(b"hello ")
    w.write(b"world\n")
    w.close()
    w.close()  # closing twice is a no-op
    assert any_fs.fs.read(path) == b"hello world\n"
    assert any_fs.fs.status(any_fs.path("a", "b")).is_dir


def test_create_fails_when_the_file_exists_and_leaves_it_alone(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    writer(any_fs.fs, path, b"first")
    with pytest.raises(FileExistsError) as info:
        any_fs.fs.create(path)
    assert path in str(info.value)
    assert any_fs.fs.read(path) == b"first"


def test_create_with_overwrite_replaces_the_file(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    writer(any_fs.fs, path, b"a long first version")
    writer(any_fs.fs, path, b"second", overwrite=True)
    assert any_fs.fs.read(path) == b"second"


def test_create_on_a_directory_is_refused(any_fs: FsHandle) -> None:
    any_fs.fs.mkdirs(any_fs.path("d"))
    with pytest.raises(IsADirectoryError):
        any_fs.fs.create(any_fs.path("d"), overwrite=True)


def test_append_writes_at_the_end(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    writer(any_fs.fs, path, b"one\n")
    w = any_fs.fs.append(path)
    w.write(b"two\n")
    w.close()
    w = any_fs.fs.append(path)
    w.write(b"three\n")
    w.close()
    assert any_fs.fs.read(path) == b"one\ntwo\nthree\n"
    assert any_fs.fs.status(path).size == len(b"one\ntwo\nthree\n")


def test_truncate_shorter_equal_and_longer(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    writer(any_fs.fs, path, b"0123456789")
    if not any_fs.fs.supports_truncate:
        with pytest.raises(OSError) as refused:
            any_fs.fs.truncate(path, 4)
        assert path in str(refused.value)
        assert any_fs.fs.read(path) == b"0123456789"
        return
    any_fs.fs.truncate(path, 10)  # equal: nothing changes
    assert any_fs.fs.read(path) == b"0123456789"
    any_fs.fs.truncate(path, 4)
    assert any_fs.fs.read(path) == b"0123"
    assert any_fs.fs.status(path).size == 4
    with pytest.raises(ValueError) as info:
        any_fs.fs.truncate(path, 5)
    assert path in str(info.value)
    assert any_fs.fs.read(path) == b"0123"
    w = any_fs.fs.append(path)  # writing goes on at the new end
    w.write(b"xy")
    w.close()
    assert any_fs.fs.read(path) == b"0123xy"
    any_fs.fs.truncate(path, 0)
    assert any_fs.fs.read(path) == b""


def test_rename_onto_a_missing_target(any_fs: FsHandle) -> None:
    src, dst = any_fs.path("src"), any_fs.path("dst")
    writer(any_fs.fs, src, b"data")
    any_fs.fs.rename(src, dst)
    assert not any_fs.fs.exists(src)
    assert any_fs.fs.read(dst) == b"data"


def test_rename_onto_an_existing_target_is_refused_unless_overwrite(any_fs: FsHandle) -> None:
    src, dst = any_fs.path("src"), any_fs.path("dst")
    writer(any_fs.fs, src, b"new")
    writer(any_fs.fs, dst, b"old")
    with pytest.raises(FileExistsError) as info:
        any_fs.fs.rename(src, dst)
    assert dst in str(info.value)
    assert any_fs.fs.read(src) == b"new"
    assert any_fs.fs.read(dst) == b"old"
    any_fs.fs.rename(src, dst, overwrite=True)
    assert not any_fs.fs.exists(src)
    assert any_fs.fs.read(dst) == b"new"


def test_rename_of_a_missing_source(any_fs: FsHandle) -> None:
    src = any_fs.path("missing")
    with pytest.raises(FileNotFoundError) as info:
        any_fs.fs.rename(src, any_fs.path("dst"))
    assert src in str(info.value)


def test_rename_moves_a_directory(any_fs: FsHandle) -> None:
    writer(any_fs.fs, any_fs.path("d1", "f"), b"x")
    any_fs.fs.rename(any_fs.path("d1"), any_fs.path("d2"))
    assert any_fs.fs.read(any_fs.path("d2", "f")) == b"x"
    assert not any_fs.fs.exists(any_fs.path("d1"))


def test_listing_gives_sizes_and_nanosecond_mtimes(any_fs: FsHandle) -> None:
    before = time.time_ns()
    writer(any_fs.fs, any_fs.path("a"), b"12345")
    writer(any_fs.fs, any_fs.path("b"), b"")
    any_fs.fs.mkdirs(any_fs.path("sub"))
    after = time.time_ns()
    entries = {e.name: e for e in any_fs.fs.list_dir(any_fs.root)}
    assert set(entries) == {"a", "b", "sub"}
    assert entries["a"].size == 5 and not entries["a"].is_dir
    assert entries["b"].size == 0
    assert entries["sub"].is_dir
    assert entries["a"].path == any_fs.path("a")
    for name in ("a", "b"):
        mtime = entries[name].mtime_ns
        assert isinstance(mtime, int)
        # Nanoseconds since the epoch (not ms or s); a server may stamp at ms resolution.
        assert before - 2_000_000_000 <= mtime <= after + 2_000_000_000
        assert any_fs.fs.status(any_fs.path(name)).mtime_ns == mtime
    assert any_fs.fs.list_dir(any_fs.path("sub")) == []


def test_a_scan_listing_agrees_with_list_dir(any_fs: FsHandle) -> None:
    """``list_entries`` (what a directory scan lists, where the backend has it) gives the same
    children as ``list_dir``, with the file id ``status`` gives where it has one; a missing
    path and a file are refused the same way."""
    fs = any_fs.fs
    if not isinstance(fs, EntryLister):
        pytest.skip(f"{type(fs).__name__} has no list_entries")
    for i in range(7):
        writer(fs, any_fs.path(f"f{i}"), b"x" * i)
    fs.mkdirs(any_fs.path("sub"))
    statuses = fs.list_dir(any_fs.root)
    expected = sorted((s.mtime_ns, s.name, s.path, s.size, s.is_dir) for s in statuses)
    entries = fs.list_entries(any_fs.root)
    assert sorted(e[:5] for e in entries) == expected
    assert len(expected) == 8
    # The file id where the listing has it is the one status() gives (inode, fileId).
    assert {e[2]: e[5] for e in entries if e[5] is not None} == {
        e[2]: fs.status(e[2]).file_id for e in entries if e[5] is not None
    }
    assert fs.list_entries(any_fs.path("sub")) == []
    with pytest.raises(FileNotFoundError) as info:
        fs.list_entries(any_fs.path("no", "such"))
    assert any_fs.path("no", "such") in str(info.value)
    with pytest.raises(NotADirectoryError):
        fs.list_entries(any_fs.path("f1"))


def test_read_at_offset_and_length(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    data = bytes(range(256)) * 40
    writer(any_fs.fs, path, data)
    fs = any_fs.fs
    assert fs.read(path) == data
    assert fs.read(path, 0, 10) == data[:10]
    assert fs.read(path, 1000) == data[1000:]
    assert fs.read(path, 1000, 24) == data[1000:1024]
    assert fs.read(path, len(data) - 3, 100) == data[-3:]
    assert fs.read(path, 5, 0) == b""
    assert fs.read(path, len(data)) == b""  # at the end: nothing more yet
    assert fs.read(path, len(data) + 10) == b""


def test_delete_file_directory_and_missing(any_fs: FsHandle) -> None:
    fs = any_fs.fs
    writer(fs, any_fs.path("f"), b"x")
    writer(fs, any_fs.path("d", "e", "g"), b"y")
    assert fs.delete(any_fs.path("f")) is True
    assert not fs.exists(any_fs.path("f"))
    with pytest.raises(OSError):
        fs.delete(any_fs.path("d"))  # not empty, not recursive
    assert fs.exists(any_fs.path("d", "e", "g"))
    assert fs.delete(any_fs.path("d"), recursive=True) is True
    assert not fs.exists(any_fs.path("d"))
    assert fs.delete(any_fs.path("missing")) is False


def test_mkdirs_makes_parents_and_accepts_existing(any_fs: FsHandle) -> None:
    path = any_fs.path("x", "y", "z")
    any_fs.fs.mkdirs(path)
    any_fs.fs.mkdirs(path)
    assert any_fs.fs.status(path).is_dir
    writer(any_fs.fs, any_fs.path("file"), b"")
    with pytest.raises(FileExistsError):
        any_fs.fs.mkdirs(any_fs.path("file"))


@pytest.mark.parametrize("operation", ["status", "read", "list_dir", "append", "truncate"])
def test_missing_paths_raise_file_not_found_naming_the_path(
    any_fs: FsHandle, operation: str
) -> None:
    path = any_fs.path("no", "such")
    calls: dict[str, Callable[[], object]] = {
        "status": lambda: any_fs.fs.status(path),
        "read": lambda: any_fs.fs.read(path),
        "list_dir": lambda: any_fs.fs.list_dir(path),
        "append": lambda: any_fs.fs.append(path),
        "truncate": lambda: any_fs.fs.truncate(path, 0),
    }
    with pytest.raises(FileNotFoundError) as info:
        calls[operation]()
    assert path in str(info.value)
    assert not any_fs.fs.exists(path)


def test_wrong_kind_of_path(any_fs: FsHandle) -> None:
    writer(any_fs.fs, any_fs.path("f"), b"x")
    any_fs.fs.mkdirs(any_fs.path("d"))
    with pytest.raises(NotADirectoryError):
        any_fs.fs.list_dir(any_fs.path("f"))
    with pytest.raises(IsADirectoryError):
        any_fs.fs.read(any_fs.path("d"))


def test_permission_denied_names_the_path(any_fs: FsHandle) -> None:
    ro = any_fs.path("ro")
    any_fs.fs.mkdirs(ro)
    target = any_fs.path("ro", "f")
    with any_fs.read_only_dir(ro):
        with pytest.raises(PermissionError) as info:
            writer(any_fs.fs, target, b"x")
        assert target in str(info.value)
    assert not any_fs.fs.exists(target)
    writer(any_fs.fs, target, b"x")  # writable again


def test_a_second_writer_is_refused_while_the_first_holds_the_lease(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    first = any_fs.fs.create(path)
    first.write(b"first")
    try:
        with pytest.raises(BlockingIOError) as info:
            any_fs.fs.append(path)
        assert path in str(info.value)
        with pytest.raises(BlockingIOError):
            any_fs.fs.create(path, overwrite=True)
    finally:
        first.close()
    assert any_fs.fs.read(path) == b"first"
    second = any_fs.fs.append(path)  # free once the first writer closed
    second.write(b"+second")
    second.close()
    assert any_fs.fs.read(path) == b"first+second"


def test_a_writer_dropped_without_close_releases_the_lease(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    w = any_fs.fs.create(path)
    w.flush()
    del w  # as when the code holding it failed; bytes never flushed may be lost
    second = any_fs.fs.append(path)
    second.write(b"x")
    second.close()
    assert any_fs.fs.read(path).endswith(b"x")


def test_flush_makes_bytes_visible_and_sync_keeps_them(any_fs: FsHandle) -> None:
    path = any_fs.path("f")
    w = any_fs.fs.create(path)
    try:
        w.write(b"line 1\n")
        w.flush()
        assert any_fs.fs.read(path) == b"line 1\n"
        w.write(b"line 2\n")
        w.sync()
        assert any_fs.fs.read(path) == b"line 1\nline 2\n"
        assert any_fs.fs.status(path).size == 14
        w.flush()  # nothing new: no change
        assert any_fs.fs.read(path) == b"line 1\nline 2\n"
    finally:
        w.close()


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(max_size=20)),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("reopen"), st.none()),
        st.tuples(st.just("truncate"), st.integers(0, 60)),
    ),
    max_size=12,
)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_write_append_truncate_match_a_model(
    any_fs: FsHandle, ops: list[tuple[str, object]]
) -> None:
    """Closed writers, appends and truncates leave exactly the bytes a plain model predicts."""
    path = any_fs.path(f"model-{time.monotonic_ns()}")
    fs = any_fs.fs
    model = b""  # the file's content once every writer is closed
    pending = b""
    w = fs.create(path)
    for op, arg in ops:
        if op == "write":
            assert isinstance(arg, bytes)
            w.write(arg)
            pending += arg
        elif op == "flush":
            w.flush()
            model, pending = model + pending, b""
            assert fs.read(path) == model
        elif op == "reopen":
            w.close()
            model, pending = model + pending, b""
            w = fs.append(path)
        else:
            assert isinstance(arg, int)
            w.close()
            model, pending = model + pending, b""
            if not fs.supports_truncate:
                pass  # publish-by-rename backends: a reopen only
            elif arg > len(model):
                with pytest.raises(ValueError):
                    fs.truncate(path, arg)
            else:
                fs.truncate(path, arg)
                model = model[:arg]
            w = fs.append(path)
    w.close()
    assert fs.read(path) == model + pending
    assert fs.status(path).size == len(model + pending)
