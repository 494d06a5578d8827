"""HDFS2FileCopy on the local disk and the WebHDFS stand-in: both directions, the IBM result
tuple and metric, existing destinations, deleting the source, leftovers of killed copies, and a
crash at every filesystem call followed by a repeat (property)."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Any, NamedTuple, cast

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.common.errors import BadRecordError
from operators.copy import (
    CopyResult,
    CopySettings,
    HDFS2FileCopy,
    SameFileError,
    SourceGoneError,
    copy_file,
)
from operators.copy.transfer import COPYING_SUFFIX, is_temporary_of, temporary_name
from operators.fs import LocalFileSystem, open_path
from operators.testing.injection import Injector, InstrumentedFS, SimulatedCrash
from operators.testing.schedule import Fault, FsPoint
from operators.testing.webhdfs_server import WebHdfsServer
from region.fs import FileStatus, FileSystem
from tests.conftest import webhdfs_settings

LOCAL = LocalFileSystem()


def _put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def _settings(**values: Any) -> CopySettings:
    values.setdefault("direction", "copyFromLocalFile")
    return CopySettings.model_validate(values)


# -- settings ---------------------------------------------------------------------------------


def test_ibm_names_are_accepted_as_aliases() -> None:
    s = CopySettings.model_validate(
        {
            "localFileAttrName": "local",
            "hdfsFile": "/landing/",
            "deleteSourceFile": True,
            "overwriteDestinationFile": True,
            "direction": "copyToLocalFile",
        }
    )
    assert (s.local_file_attr_name, s.hdfs_file, s.direction) == (
        "local",
        "/landing/",
        "copyToLocalFile",
    )
    assert s.delete_source_file and s.overwrite_destination_file


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"local_file": "a", "local_file_attr_name": "x", "hdfs_file": "/b"}, "exclude each other"),
        ({"hdfs_file": "/b"}, "one of local_file or local_file_attr_name is required"),
        ({"local_file": "a"}, "one of hdfs_file or hdfs_file_attr_name is required"),
        ({"local_file": "a", "hdfs_file": "/b", "direction": "sideways"}, "copyFromLocalFile"),
        ({"local_file": " ", "hdfs_file": "/b"}, "local_file=' ' is empty"),
        ({"local_file": "a", "hdfs_file": "/b", "chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_settings_name_the_field(values: dict[str, Any], words: str) -> None:
    values.setdefault("direction", "copyFromLocalFile")
    with pytest.raises(ValidationError, match=words):
        CopySettings.model_validate(values)


def test_direction_is_required_as_in_ibm() -> None:
    with pytest.raises(ValidationError, match="direction"):
        CopySettings.model_validate({"local_file": "a", "hdfs_file": "/b"})


# -- the copy ---------------------------------------------------------------------------------


def test_copy_from_local_returns_ibm_result_and_counts(tmp_path: Path) -> None:
    src = _put(tmp_path / "in" / "a.bin", os.urandom(100_000))
    dst = tmp_path / "hdfs" / "a.bin"
    op = HDFS2FileCopy(_settings(local_file=str(src), hdfs_file=str(dst), chunk_size=4096))
    result = op.copy()
    assert isinstance(result, CopyResult) and result.ok
    assert result.result == f"100000 bytes successfully copied from file://{src} to file://{dst} ."
    assert isinstance(result.elapsed_time, int) and result.elapsed_time >= 0
    assert dst.read_bytes() == src.read_bytes()
    assert src.exists()  # deleteSourceFile is off
    assert op.n_copied_files == 1
    assert op.metrics()["n_copied_files"] == 1 and op.metrics()["bytes_copied"] == 100_000
    assert _hidden(dst.parent) == []


def test_copy_to_local_into_a_directory_keeps_the_name(tmp_path: Path) -> None:
    src = _put(tmp_path / "hdfs" / "data.csv", b"a,b\n1,2\n")
    (tmp_path / "local").mkdir()
    op = HDFS2FileCopy(
        _settings(direction="copyToLocalFile", local_file=f"{tmp_path}/local/", hdfs_file=str(src))
    )
    assert op.copy().ok
    assert (tmp_path / "local" / "data.csv").read_bytes() == b"a,b\n1,2\n"
    # An existing directory without the trailing slash receives the name too (as Hadoop's).
    dst = tmp_path / "local2"
    dst.mkdir()
    op2 = HDFS2FileCopy(
        _settings(direction="copyToLocalFile", local_file=str(dst), hdfs_file=str(src))
    )
    assert op2.copy().ok and (dst / "data.csv").read_bytes() == b"a,b\n1,2\n"


def test_relative_local_path_is_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _put(tmp_path / "rel.txt", b"x\n")
    op = HDFS2FileCopy(_settings(local_file="rel.txt", hdfs_file=f"{tmp_path}/out/"))
    assert op.copy().ok and (tmp_path / "out" / "rel.txt").read_bytes() == b"x\n"


def test_per_record_attributes_mapping_and_object(tmp_path: Path) -> None:
    class Row(NamedTuple):
        local: str
        remote: str

    for i in range(3):
        _put(tmp_path / "in" / f"f{i}", f"file {i}\n".encode())
    op = HDFS2FileCopy(
        _settings(
            local_file_attr_name="local", hdfs_file_attr_name="remote", delete_source_file=True
        )
    )
    out = f"{tmp_path}/out/"
    results = [
        op.process({"local": f"{tmp_path}/in/f0", "remote": out}),
        op(Row(f"{tmp_path}/in/f1", out)),  # a pipeline transform
        op.process({"local": f"{tmp_path}/in/f2", "remote": out + "renamed"}),
    ]
    assert all(r.ok for r in results)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["f0", "f1", "renamed"]
    assert list((tmp_path / "in").iterdir()) == []
    assert op.n_copied_files == 3


def test_bad_record_names_the_attribute(tmp_path: Path) -> None:
    op = HDFS2FileCopy(_settings(local_file_attr_name="local", hdfs_file=f"{tmp_path}/out/"))
    with pytest.raises(BadRecordError, match="'local'") as info:
        op.process({"path": "x"})
    assert info.value.field == "local"
    with pytest.raises(BadRecordError, match="non-empty string"):
        op.process({"local": 7})
    assert op.n_copied_files == 0 and op.copy_errors == 2


def test_on_error_emit_gives_ibm_error_result_and_goes_on(tmp_path: Path) -> None:
    op = HDFS2FileCopy(
        _settings(local_file_attr_name="local", hdfs_file=f"{tmp_path}/out/", on_error="emit")
    )
    missing = op.process({"local": f"{tmp_path}/nope"})
    assert not missing.ok and missing.result.startswith("ERROR :")
    assert "nope" in missing.result
    _put(tmp_path / "there", b"ok")
    assert op.process({"local": f"{tmp_path}/there"}).ok
    assert op.metrics() == {
        "n_copied_files": 1,
        "bytes_copied": 2,
        "files_already_there": 0,
        "copy_errors": 1,
    }


def test_missing_source_is_file_not_found_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        copy_file(LOCAL, str(tmp_path / "nope"), LOCAL, str(tmp_path / "dst"))
    assert not (tmp_path / "dst").exists()


def test_a_directory_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError, match="only single files"):
        copy_file(LOCAL, str(tmp_path / "d"), LOCAL, str(tmp_path / "x"))


def test_same_file_is_refused(tmp_path: Path) -> None:
    src = _put(tmp_path / "a", b"a")
    with pytest.raises(SameFileError, match="same file"):
        copy_file(LOCAL, str(src), LOCAL, str(tmp_path) + "/")
    assert src.read_bytes() == b"a"


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("alias", ["linked directory", "linked file", "hard link"])
def test_the_source_under_another_name_is_refused_and_kept(
    tmp_path: Path, alias: str, overwrite: bool
) -> None:
    """A symlinked directory, a symlink to the file or a hard link: one file, never deleted."""
    data = b"line\n" * 1000
    src = _put(tmp_path / "real" / "b.txt", data)
    if alias == "linked directory":
        (tmp_path / "linkdir").symlink_to(tmp_path / "real")
        dst = f"{tmp_path}/linkdir/"
    elif alias == "linked file":
        (tmp_path / "link.txt").symlink_to(src)
        dst = str(tmp_path / "link.txt")
    else:
        os.link(src, tmp_path / "hard.txt")
        dst = str(tmp_path / "hard.txt")
    with pytest.raises(SameFileError, match="same file"):
        copy_file(LOCAL, str(src), LOCAL, dst, delete_source=True, overwrite=overwrite)
    assert src.read_bytes() == data
    assert _hidden(tmp_path / "real") == []


class _Blind:
    """The local disk through a filesystem without file ids or NameNode addresses: two such
    handles cannot be compared, so the copy's last guard has to prove the files apart."""

    def __init__(self) -> None:
        self._fs = LocalFileSystem()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def status(self, path: str) -> FileStatus:
        return self._fs.status(path)._replace(file_id=None)


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_unprovable_destination_is_written_and_the_source_kept_when_it_is_the_source(
    tmp_path: Path, overwrite: bool
) -> None:
    src_fs, dst_fs = cast(FileSystem, _Blind()), cast(FileSystem, _Blind())
    data = os.urandom(30_000)
    src = _put(tmp_path / "real" / "b.txt", data)
    (tmp_path / "linkdir").symlink_to(tmp_path / "real")
    with pytest.raises(SameFileError, match="same file"):
        copy_file(
            src_fs,
            str(src),
            dst_fs,
            f"{tmp_path}/linkdir/",
            delete_source=True,
            overwrite=overwrite,
        )
    assert src.read_bytes() == data  # replaced by an identical copy, and kept
    assert _hidden(tmp_path / "real") == []
    # Two files indeed: proven by the copy's own write, and the source deleted.
    other = _put(tmp_path / "other" / "b.txt", data)
    done = copy_file(src_fs, str(other), dst_fs, str(src), delete_source=True)
    assert done.written and done.source_deleted and not other.exists()
    assert src.read_bytes() == data


@given(
    alias=st.sampled_from(["linked directory", "linked file", "hard link", "copy", "other"]),
    blind=st.booleans(),
    overwrite=st.booleans(),
)
def test_delete_source_never_loses_the_only_copy(
    tmp_path_factory: pytest.TempPathFactory, alias: str, blind: bool, overwrite: bool
) -> None:
    """Whatever name the destination has, comparable or not: after a copy with
    ``delete_source`` the data is still somewhere, the source deleted only when the destination
    is another file holding it."""
    base = tmp_path_factory.mktemp("alias")
    data = os.urandom(5_000)
    src = _put(base / "real" / "b.txt", data)
    if alias == "linked directory":
        (base / "linkdir").symlink_to(base / "real")
        dst = base / "linkdir" / "b.txt"
    elif alias == "linked file":
        dst = base / "link.txt"
        dst.symlink_to(src)
    elif alias == "hard link":
        dst = base / "hard.txt"
        os.link(src, dst)
    else:
        dst = _put(base / "out" / "b.txt", data if alias == "copy" else b"other")
    one_file = alias not in ("copy", "other")
    src_fs: FileSystem = cast(FileSystem, _Blind()) if blind else LOCAL
    dst_fs: FileSystem = cast(FileSystem, _Blind()) if blind else LOCAL
    try:
        done = copy_file(
            src_fs, str(src), dst_fs, str(dst), delete_source=True, overwrite=overwrite
        )
    except SameFileError:
        event(f"same file, blind={blind}")
        assert one_file and src.read_bytes() == data
    except FileExistsError:
        assert alias == "other" and not overwrite and src.read_bytes() == data
    else:
        event(f"copied, blind={blind}")
        assert done.source_deleted and not src.exists()
        assert dst.read_bytes() == data and not dst.is_symlink()
        # Seen blind, a link or a hard link is a name of its own that the copy replaced with
        # its own file: then two files. Through a linked directory it is the source's name.
        assert alias != "linked directory" and (blind or not one_file)
    assert [p.name for p in (base / "real").iterdir()] == (["b.txt"] if src.exists() else [])


def test_deleted_source_with_a_destination_there_is_not_copied(tmp_path: Path) -> None:
    """A file already at the destination does not make a missing source a success."""
    dst = _put(tmp_path / "out" / "a", b"copied before")
    with pytest.raises(SourceGoneError, match="nothing copied") as info:
        copy_file(LOCAL, str(tmp_path / "a"), LOCAL, f"{tmp_path}/out/", delete_source=True)
    assert info.value.filename == f"file://{tmp_path}/a"
    assert f"file://{dst}" in str(info.value)
    assert dst.read_bytes() == b"copied before"


def test_a_crash_after_deleting_the_source_is_finished_by_its_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.copy import transfer

    src = _put(tmp_path / "a", b"data\n")
    out = tmp_path / "out"
    out.mkdir()

    def crash(point: str) -> None:
        if point == "copy_after_source_deleted":
            raise SimulatedCrash(point)

    monkeypatch.setattr(transfer, "_fault", crash)
    with pytest.raises(SimulatedCrash):
        copy_file(LOCAL, str(src), LOCAL, f"{out}/", delete_source=True)
    assert not src.exists() and (out / "a").read_bytes() == b"data\n"
    (marker,) = _hidden(out)
    assert marker.endswith(transfer.MARKER_SUFFIX)
    monkeypatch.undo()
    done = copy_file(LOCAL, str(src), LOCAL, f"{out}/", delete_source=True)
    assert not done.written and done.destination == f"file://{out}/a"
    assert _hidden(out) == []
    # Once finished and told, a repeat finds no marker: not copied.
    with pytest.raises(SourceGoneError):
        copy_file(LOCAL, str(src), LOCAL, f"{out}/", delete_source=True)
    # A marker proves only the destination it recorded: replaced since, it proves nothing.
    src.write_bytes(b"data\n")
    monkeypatch.setattr(transfer, "_fault", crash)
    with pytest.raises(SimulatedCrash):
        copy_file(LOCAL, str(src), LOCAL, f"{out}/a", delete_source=True, overwrite=True)
    monkeypatch.undo()
    _put(out / "a", b"other\n")
    with pytest.raises(SourceGoneError):
        copy_file(LOCAL, str(src), LOCAL, f"{out}/", delete_source=True)


@pytest.mark.parametrize(
    "name",
    # The last: a Latin-1 name (not UTF-8), as files from other systems land on a local disk.
    ["a%20b.txt", "a b.txt", "c%2Fd?#e.txt", "é:ü.txt", os.fsdecode(b"caf\xe9 %.txt")],
)
def test_the_result_names_the_files_it_copied(tmp_path: Path, name: str) -> None:
    """Given back, the URIs in the result name the same files, also beside a look-alike."""
    (tmp_path / "in").mkdir()
    _put(tmp_path / "in" / "a b.txt", b"the other file\n")
    _put(tmp_path / "in" / "a%20b.txt", b"the other file, too\n")
    src = _put(tmp_path / "in" / name, b"this one\n")
    done = copy_file(LOCAL, str(src), LOCAL, f"{tmp_path}/out/")
    assert (tmp_path / "out" / name).read_bytes() == b"this one\n"
    for uri in (done.source, done.destination):
        fs, path = open_path(uri)
        assert fs.read(path) == b"this one\n", uri
    # A copy given the printed URI copies that file.
    fs, path = open_path(done.destination)
    back = copy_file(fs, path, LOCAL, f"{tmp_path}/back/")
    assert (tmp_path / "back" / name).read_bytes() == b"this one\n"
    assert back.source == done.destination


def test_existing_other_destination_is_never_overwritten(tmp_path: Path) -> None:
    src = _put(tmp_path / "a", b"new content")
    dst = _put(tmp_path / "out" / "a", b"old content")  # same size, other bytes
    with pytest.raises(FileExistsError) as info:
        copy_file(LOCAL, str(src), LOCAL, str(dst), delete_source=True)
    assert info.value.filename == f"file://{dst}"
    assert dst.read_bytes() == b"old content" and src.exists()
    assert _hidden(dst.parent) == []


def test_overwrite_replaces_atomically(tmp_path: Path) -> None:
    src = _put(tmp_path / "a", b"new content, longer")
    dst = _put(tmp_path / "out" / "a", b"old")
    before = os.stat(dst).st_ino
    done = copy_file(LOCAL, str(src), LOCAL, str(dst), overwrite=True)
    assert done.written and dst.read_bytes() == b"new content, longer"
    assert os.stat(dst).st_ino != before  # a new file renamed in, not the old one rewritten
    assert _hidden(dst.parent) == []


def test_existing_same_destination_is_success_without_writing(tmp_path: Path) -> None:
    data = os.urandom(50_000)
    src = _put(tmp_path / "a", data)
    dst = _put(tmp_path / "out" / "a", data)
    mtime = os.stat(dst).st_mtime_ns
    done = copy_file(LOCAL, str(src), LOCAL, str(dst), delete_source=True, chunk=1000)
    assert not done.written and done.source_deleted and done.size == 50_000
    assert os.stat(dst).st_mtime_ns == mtime and not src.exists()


def test_leftover_temporaries_are_removed_only_ours(tmp_path: Path) -> None:
    src = _put(tmp_path / "a.txt", b"data")
    out = tmp_path / "out"
    ours = _put(out / temporary_name("a.txt"), b"partial")
    other_dest = _put(out / temporary_name("b.txt"), b"another copy's")
    foreign = [_put(out / ".a.txt.inprogress", b"x"), _put(out / "a.txt._COPYING_", b"y")]
    copy_file(LOCAL, str(src), LOCAL, str(out / "a.txt"))
    assert not ours.exists()
    assert other_dest.exists() and all(p.exists() for p in foreign)
    assert (out / "a.txt").read_bytes() == b"data"


def test_a_temporary_a_live_writer_holds_is_left_alone(tmp_path: Path) -> None:
    src = _put(tmp_path / "a.txt", b"data")
    live = _put(tmp_path / "out" / temporary_name("a.txt"), b"being written")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        copy_file(LOCAL, str(src), LOCAL, str(tmp_path / "out" / "a.txt"))
        assert live.exists()
    finally:
        os.close(fd)
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"data"


def test_temporary_names_are_hidden_unique_and_recognised() -> None:
    a, b = temporary_name("x.csv"), temporary_name("x.csv")
    assert a != b and a.startswith(".x.csv.") and a.endswith(COPYING_SUFFIX)
    assert is_temporary_of(a, "x.csv") and not is_temporary_of(a, "x.cs")
    long = "n" * 255
    t = temporary_name(long)
    assert len(t.encode()) <= 255 and is_temporary_of(t, long)
    assert not is_temporary_of(t, "n" * 254)


class _GrowingSource:
    """The local disk, but the source grows after its first read (a writer still at it)."""

    def __init__(self, path: str) -> None:
        self._inner = LOCAL
        self._path = path
        self.supports_truncate = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        data = self._inner.read(path, offset, length)
        if path == self._path and offset == 0:
            with open(path, "ab") as f:
                f.write(b"more\n")
        return data


def test_a_source_changing_while_copied_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    src = _put(tmp_path / "a", b"x" * 10_000)
    grow: Any = _GrowingSource(str(src))
    with pytest.raises(OSError, match="changed while it was copied") as info:
        copy_file(grow, str(src), LOCAL, str(tmp_path / "out" / "a"), chunk=4096)
    assert info.value.errno == errno.EAGAIN
    assert not (tmp_path / "out" / "a").exists() and _hidden(tmp_path / "out") == []


def test_both_directions_on_webhdfs_standin(webhdfs_server: WebHdfsServer, tmp_path: Path) -> None:
    fs, _ = open_path("/", webhdfs_settings(webhdfs_server.uri))
    root = f"/tests/copy-{os.getpid()}-{time.monotonic_ns()}"
    fs.mkdirs(root)
    data = os.urandom(300_000)
    src = _put(tmp_path / "a.bin", data)
    up = HDFS2FileCopy(
        _settings(local_file=str(src), hdfs_file=root + "/in/", chunk_size=65536),
        fs,
    )
    assert up.copy().ok
    assert fs.read(root + "/in/a.bin") == data
    down = HDFS2FileCopy(
        _settings(
            direction="copyToLocalFile",
            local_file=str(tmp_path / "back.bin"),
            hdfs_file=root + "/in/a.bin",
            delete_source_file=True,
        ),
        fs,
    )
    assert down.copy().ok
    assert (tmp_path / "back.bin").read_bytes() == data
    assert not fs.exists(root + "/in/a.bin")
    assert [e.name for e in fs.list_dir(root + "/in")] == []


# -- a crash at every filesystem call, then the same copy again ---------------------------------


class _Process:
    """The process a fault kills: its filesystems refuse every call from then on, and what its
    writers hold lands (the kernel closes the file)."""

    def __init__(self) -> None:
        self.dead = False
        self.filesystems: list[InstrumentedFS] = []

    def die(self, where: str) -> None:
        self.dead = True
        for fs in self.filesystems:
            fs.dead = True
            for writer in list(fs.writers):
                writer.kill()


def _instrumented(injector: Injector, src_dir: str, dst_dir: str) -> InstrumentedFS:
    return InstrumentedFS(LOCAL, injector, {"input": src_dir, "output": dst_dir})


@given(
    size=st.integers(0, 40_000),
    existing=st.sampled_from(["none", "same", "other"]),
    overwrite=st.booleans(),
    delete_source=st.booleans(),
    # The calls a copy makes (append and truncate it never does).
    op=st.sampled_from(["list", "read", "create", "write", "sync", "close", "rename", "delete"]),
    area=st.sampled_from(["input", "output"]),
    nth=st.integers(1, 3),
    crash=st.booleans(),
    when=st.sampled_from(["before", "after", "during"]),
    data=st.data(),
)
def test_a_crash_anywhere_then_a_repeat_gives_the_whole_file(
    tmp_path_factory: pytest.TempPathFactory,
    size: int,
    existing: str,
    overwrite: bool,
    delete_source: bool,
    op: str,
    area: str,
    nth: int,
    crash: bool,
    when: str,
    data: st.DataObject,
) -> None:
    if when == "during" and op != "write":
        when = "before"
    if op not in ("read", "delete", "list"):
        area = "output"  # the source is only read and deleted
    if op not in ("read", "write"):
        nth = 1  # made once per copy
    src_dir, dst_dir = tmp_path_factory.mktemp("in"), tmp_path_factory.mktemp("out")
    content = data.draw(st.binary(min_size=size, max_size=size), label="content")
    src = _put(src_dir / "f.bin", content)
    dst = dst_dir / "f.bin"
    if existing == "same":
        _put(dst, content)
    elif existing == "other":
        _put(dst, content + b"-old")
    old = dst.read_bytes() if dst.exists() else None
    expect_refusal = existing == "other" and not overwrite

    def attempt(fault: Fault | None) -> tuple[bool, BaseException | None]:
        injector = Injector()
        process = _Process()
        injector.process = process
        fs = _instrumented(injector, str(src_dir), str(dst_dir))
        process.filesystems.append(fs)
        injector.arm(fault)
        fs_: FileSystem = fs
        try:
            copy_file(
                fs_,
                str(src),
                fs_,
                str(dst),
                overwrite=overwrite,
                delete_source=delete_source,
                chunk=7_000,
            )
        except SimulatedCrash:
            return True, None
        except OSError as exc:
            return False, exc
        return False, None

    # A crash kills the process; a failure is an I/O error the copy sees and cleans up after.
    fault = Fault(FsPoint(op, area, nth, when), crash=crash)  # type: ignore[arg-type]
    crashed, failure = attempt(fault)
    fired = "crashed" if crashed else "failed" if failure else "fault not reached"
    event(f"{fired}, existing destination: {existing}")
    if not crashed and failure is None:
        assert not expect_refusal and dst.read_bytes() == content
    # Whatever happened, the destination is the old file or the whole new one, never partial.
    now = dst.read_bytes() if dst.exists() else None
    assert now in (old, content)
    if now == content and old != content:
        assert not expect_refusal
    if src.exists():
        assert src.read_bytes() == content  # the source is never touched but to be deleted
    else:
        assert delete_source and now == content  # deleted only once the destination is whole
    # Again, without the fault: the copy completes (or is refused as before).
    # A first attempt that deleted the source and its marker finished: a repeat finds neither
    # a source nor a marker and reports it not copied (the file stays at the destination).
    finished = delete_source and not src.exists() and not _hidden(dst_dir)
    crashed_again, failure = attempt(None)
    assert not crashed_again
    if finished:
        assert isinstance(failure, SourceGoneError), failure
        assert dst.read_bytes() == content
    elif expect_refusal:
        assert isinstance(failure, FileExistsError)
        assert dst.read_bytes() == old
        assert src.read_bytes() == content
    else:
        assert failure is None, failure
        assert dst.read_bytes() == content
        assert src.exists() != delete_source
    assert [p.name for p in dst_dir.iterdir() if p.name != "f.bin"] == []


def test_the_property_sees_partial_temporaries(tmp_path: Path) -> None:
    """The crash test can fail: a crash in the middle of a write leaves a partial temporary,
    which the repeat removes."""
    src = _put(tmp_path / "in" / "f", b"z" * 20_000)
    (tmp_path / "out").mkdir()
    injector = Injector()
    process = _Process()
    injector.process = process
    fs = _instrumented(injector, str(tmp_path / "in"), str(tmp_path / "out"))
    process.filesystems.append(fs)
    injector.arm(Fault(FsPoint("write", "output", 2, "during")))
    with pytest.raises(SimulatedCrash):
        copy_file(fs, str(src), fs, str(tmp_path / "out" / "f"), chunk=7_000)
    left = _hidden(tmp_path / "out")
    assert len(left) == 1 and 7_000 < (tmp_path / "out" / left[0]).stat().st_size < 20_000
    copy_file(LOCAL, str(src), LOCAL, str(tmp_path / "out" / "f"))
    assert _hidden(tmp_path / "out") == [] and (tmp_path / "out" / "f").stat().st_size == 20_000


# -- IBM weaknesses fixed -----------------------------------------------------------------------


def test_copy_to_local_never_overwrites_without_the_setting(tmp_path: Path) -> None:
    """IBM's copyToLocalFile overwrote the local file whatever overwriteDestinationFile said."""
    src = _put(tmp_path / "hdfs" / "f", b"remote\n")
    local = _put(tmp_path / "local" / "f", b"precious local\n")
    values = {"direction": "copyToLocalFile", "local_file": str(local), "hdfs_file": str(src)}
    with pytest.raises(FileExistsError, match="other content"):
        HDFS2FileCopy(_settings(**values)).copy()
    assert local.read_bytes() == b"precious local\n"
    assert HDFS2FileCopy(_settings(overwrite_destination_file=True, **values)).copy().ok
    assert local.read_bytes() == b"remote\n"


def test_result_reports_the_bytes_copied_when_the_source_is_deleted(tmp_path: Path) -> None:
    """IBM read the size from the local file after deleting it: '0 bytes successfully...'."""
    src = _put(tmp_path / "f", b"12345")
    op = HDFS2FileCopy(
        _settings(local_file=str(src), hdfs_file=f"{tmp_path}/out/", delete_source_file=True)
    )
    assert op.copy().result.startswith("5 bytes successfully copied from ")
    assert not src.exists()


def test_failures_raise_by_default(tmp_path: Path) -> None:
    """IBM turned every failure into a result string; here it raises unless on_error='emit'."""
    op = HDFS2FileCopy(_settings(local_file=str(tmp_path / "nope"), hdfs_file=str(tmp_path / "x")))
    with pytest.raises(FileNotFoundError):
        op.copy()
    assert op.metrics()["copy_errors"] == 1 and op.n_copied_files == 0
