"""The content rule of :mod:`operators.source.ledger`, against a model of files landing every way a
user lands them: every line written is read exactly once."""

from __future__ import annotations

import base64
import collections
import json
import zlib
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.source.ledger import ReadLedger, exact_fingerprint, fingerprint, prefix_crc

#: One step: (operation, file index, lines). Lines are numbered as written, so each is unique.
OPS = ("append", "rewrite", "cumulative", "rotate", "copytruncate", "read")


class Landing:
    """Files as bytes by path; what a reader using the ledger emits."""

    def __init__(self, ledger: ReadLedger, *, exact: bool = False) -> None:
        self.files: dict[str, bytes] = {}
        self.ledger = ledger
        self.exact = exact
        self.emitted: list[bytes] = []
        self.counter = 0
        self.clock = 0.0
        self.seen: set[bytes] = set()

    def lines(self, n: int) -> list[bytes]:
        out = [b"line %d\n" % (self.counter + i) for i in range(n)]
        self.counter += n
        return out

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            return self.files[path][offset : offset + length]
        except KeyError:
            raise FileNotFoundError(path) from None

    def step(self, op: str, name: str, n: int) -> None:
        files = self.files
        if op == "append":
            files[name] = files.get(name, b"") + b"".join(self.lines(n))
        elif op == "rewrite":  # other content under the name (cp or mv over it)
            files[name] = b"".join(self.lines(n))
        elif op == "cumulative":  # every row so far and new ones, written anew (another inode)
            files[name] = files.get(name, b"") + b"".join(self.lines(n))
        elif op == "rotate" and name in files:  # rename to name.1, a new file under name
            files[name + ".1"] = files.pop(name)
            files[name] = b"".join(self.lines(n))
        elif op == "copytruncate" and name in files:
            files[name + ".1"] = files[name]
            files[name] = b"".join(self.lines(n))
        elif op == "read":
            self.read_all()

    def read_all(self) -> None:
        """A scan: every path in the order a listing sorts them; each read to its end."""
        for data in self.files.values():  # what a reader can see: lines written over unseen are not
            self.seen.update(data.splitlines(keepends=True))
        for path in sorted(self.files):
            data = self.files[path]
            own = self.ledger.get(path)
            if (
                own is not None
                and own.length == len(data)
                and self.ledger.continues_at(path, len(data), self.read_range).offset == len(data)
            ):
                continue  # unchanged
            where = self.ledger.continues_at(path, len(data), self.read_range)
            if where.offset == 0 and path in self.ledger:
                self.ledger.set_aside(path)
            if where.taken_from is not None:
                self.ledger.take(path, where.taken_from)
            self.emitted += data[where.offset :].splitlines(keepends=True)
            self.clock += 1
            if self.exact:  # as a reader does: on from what the file continues
                crc = prefix_crc(path, len(data), self.read_range, self.ledger.get(path))
                assert crc == zlib.crc32(data)
                read = exact_fingerprint(data, len(data), crc, self.clock)
            else:
                read = fingerprint(data[:4096], data[-4096:], len(data), self.clock)
            self.ledger.remember(path, read)


step = st.tuples(st.sampled_from(OPS), st.sampled_from(["a", "b", "c"]), st.integers(1, 400))


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=25), st.booleans())
def test_every_line_written_is_read_exactly_once_however_it_lands(steps: list, exact: bool) -> None:
    """Appends, rewrites, cumulative exports, rotations by rename and copytruncate, read in
    between at any moment: each line once (lines of up to 400 x 9 bytes cross the 4 KiB head
    and edge windows), under either check (the exact one reading in chunks of 1,000 bytes
    here, so a prefix spans several)."""
    landing = Landing(ReadLedger(keep_files=1000, keep_for=1e9), exact=exact)
    with mock.patch("operators.source.ledger._EXACT_CHUNK", 1000):
        for op, name, n in steps:
            landing.step(op, name, n)
        landing.read_all()
    assert collections.Counter(landing.emitted) == collections.Counter(landing.seen)


def test_the_exact_check_tells_a_rewrite_of_the_middle_the_windows_pass() -> None:
    """A file rewritten with the same first and last 4 KiB of what was read, its middle
    changed: the windows take it for the same file (the documented way to fool them), the
    exact check reads it whole as new. A read remembered under either check is compared by
    what it holds (the setting may change between runs)."""
    old = b"".join(b"row %05d\n" % i for i in range(2000))  # 20,000 bytes
    new = old[:8000] + old[8000:12000].replace(b"row", b"ROW") + old[12000:]
    files = {"/d/x.csv": new}

    def read(path: str, offset: int, length: int) -> bytes:
        return files[path][offset : offset + length]

    windows = ReadLedger(keep_files=10, keep_for=1e9)
    windows.remember("/d/x.csv", fingerprint(old[:4096], old[-4096:], len(old), 1.0))
    assert windows.continues_at("/d/x.csv", len(new), read).offset == len(old)
    exact = ReadLedger(keep_files=10, keep_for=1e9)
    exact.remember("/d/x.csv", exact_fingerprint(old, len(old), zlib.crc32(old), 1.0))
    assert exact.continues_at("/d/x.csv", len(new), read).offset == 0
    files["/d/x.csv"] = old + b"row 02000\n"  # appended to: continues under both
    assert exact.continues_at("/d/x.csv", len(old) + 10, read).offset == len(old)
    restored = ReadLedger(keep_files=10, keep_for=1e9)
    restored.restore(exact.state())
    assert restored.continues_at("/d/x.csv", len(old) + 10, read).offset == len(old)
    since = exact.get("/d/x.csv")
    assert prefix_crc("/d/x.csv", len(old) + 10, read, since) == zlib.crc32(files["/d/x.csv"])
    assert prefix_crc("/d/x.csv", len(old) + 11, read, since) is None  # shorter than that


def test_state_round_trips_and_is_encoded_once_per_change() -> None:
    ledger = ReadLedger(keep_files=10, keep_for=100.0)
    ledger.remember("/d/a", fingerprint(b"abc\n", b"abc\n", 4, 1.0))
    ledger.set_aside("/d/a")
    ledger.remember("/d/a", fingerprint(b"xyz\n", b"xyz\n", 4, 2.0))
    state = ledger.state()
    assert ledger.state() is not state and ledger.state()["reads"][0] is state["reads"][0]
    again = ReadLedger(keep_files=10, keep_for=100.0)
    again.restore(state)
    assert again.get("/d/a") == ledger.get("/d/a") and len(again) == 2


def test_a_cut_that_remembers_one_file_encodes_one_chunk_and_old_states_restore() -> None:
    ledger = ReadLedger(keep_files=10_000, keep_for=100.0)
    for i in range(3000):
        ledger.remember(f"/d/f{i}", fingerprint(b"a", b"a", 1 + i, 1.0))
    before = ledger.state()["reads"]
    ledger.remember("/d/new", fingerprint(b"n", b"n", 1, 2.0))
    after = ledger.state()["reads"]
    assert len(after) == len(before) > 1
    assert all(a is b for a, b in zip(after[:-1], before[:-1], strict=True))
    assert after[-1] is not before[-1]
    # A checkpoint written before chunks holds the reads as one string.
    rows = [[p, *r] for p, r in ledger._reads.items()]
    one = base64.b64encode(zlib.compress(json.dumps(rows).encode())).decode()
    again = ReadLedger(keep_files=10_000, keep_for=100.0)
    again.restore({"reads": one, "forgotten": 2})
    assert list(again._reads.items()) == list(ledger._reads.items()) and again.forgotten == 2
    chunked = ReadLedger(keep_files=10_000, keep_for=100.0)
    chunked.restore(ledger.state())
    assert list(chunked._reads.items()) == list(ledger._reads.items())


def test_empty_files_are_not_remembered_so_a_new_one_reads_no_other() -> None:
    # 1,000 empty markers would share one head: each new file compared with every one of them.
    ledger = ReadLedger(keep_files=10_000, keep_for=100.0)
    for i in range(1000):
        ledger.remember(f"/d/_SUCCESS.{i}", fingerprint(b"", b"", 0, 1.0))
    reads: list[str] = []

    def read(path: str, offset: int, length: int) -> bytes:
        reads.append(path)
        return b""

    assert len(ledger) == 0
    assert ledger.continues_at("/d/_SUCCESS.new", 0, read).offset == 0 and reads == []


def test_a_file_moved_away_is_forgotten_so_the_same_bytes_under_its_name_are_new() -> None:
    data = b"same\n" * 3
    ledger = ReadLedger(keep_files=10, keep_for=100.0)
    ledger.remember("/d/a", fingerprint(data, data, len(data), 1.0))

    def read(path: str, offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    assert ledger.continues_at("/d/a", len(data), read).offset == len(data)
    ledger.forget("/d/a", len(data) - 1)  # another read of the name (a newer file): it stays
    assert ledger.continues_at("/d/a", len(data), read).offset == len(data)
    ledger.forget("/d/a", len(data))
    assert ledger.continues_at("/d/a", len(data), read).offset == 0
    assert "/d/a" not in ledger
    assert ledger.state() == ReadLedger(keep_files=10, keep_for=1.0).state()


def test_what_falls_out_is_counted_and_logged(caplog) -> None:  # type: ignore[no-untyped-def]
    ledger = ReadLedger(keep_files=2, keep_for=50.0)
    for i in range(3):
        ledger.remember(f"/d/{i}", fingerprint(b"x\n", b"x\n", 2, float(i)))
    assert ledger.forgotten == 1 and "/d/0" not in ledger
    ledger.remember("/d/3", fingerprint(b"x\n", b"x\n", 2, 100.0))  # the others are too old
    assert ledger.forgotten == 3 and len(ledger) == 1
    assert "forgot what was read of 1 file(s) in all" in caplog.text
