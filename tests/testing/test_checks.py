"""The comparisons behind the verdicts: exactly once in per-file order, and coverage."""

from __future__ import annotations

from collections import Counter

from operators.testing.checks import (
    Expected,
    at_least_once_problems,
    exactly_once_problems,
    fits_exactly_once,
    natural_key,
)


def expected(**files: list[str]) -> Expected:
    out = Expected()
    for name, records in files.items():
        out.add(
            name, [f"{r}\n".encode() for r in records], [repr(r) for r in records], optional=False
        )
    return out


def test_exactly_once_allows_any_file_order_but_not_reordered_records() -> None:
    required = Counter([b"a0\na1\n", b"b0\n"])
    assert fits_exactly_once(b"b0\na0\na1\n", required, {})
    assert fits_exactly_once(b"a0\na1\nb0\n", required, {})
    assert not fits_exactly_once(b"a0\nb0\na1\n", required, {})  # interleaved
    assert not fits_exactly_once(b"a1\na0\nb0\n", required, {})  # out of order
    assert not fits_exactly_once(b"a0\na1\n", required, {})  # b missing
    assert fits_exactly_once(b"a0\na1\n", required, {}, partial=True)
    assert fits_exactly_once(b"a0\na1\nb", required, {}, partial=True)  # b being written
    assert not fits_exactly_once(b"a0\na1\na0\n", required, {}, partial=True)  # a twice


def test_optional_files_may_be_missing_but_never_twice() -> None:
    assert fits_exactly_once(b"a\n", Counter([b"a\n"]), Counter([b"late\n"]))
    assert fits_exactly_once(b"a\nlate\n", Counter([b"a\n"]), Counter([b"late\n"]))
    assert not fits_exactly_once(b"late\na\nlate\n", Counter([b"a\n"]), Counter([b"late\n"]))


def test_problems_name_records_and_their_files() -> None:
    exp = expected(**{"a.txt": ["x", "y"], "b.txt": ["z"]})
    problems = exactly_once_problems(b"x\ny\nx\ny\n", exp)
    assert problems == [
        "missing (1): 'z' (record 0 of b.txt)",
        "duplicated (2 extra): 'x' x2 (record 0 of a.txt); 'y' x2 (record 1 of a.txt)",
    ]
    assert exactly_once_problems(b"y\nx\nz\n", exp) == [
        "every record is there the right number of times, but not in order: each input file's "
        "records must appear in input order, one file after another"
    ]


def test_at_least_once_accepts_repeats_and_reports_torn_records() -> None:
    exp = expected(**{"a.txt": ["r0", "r1", "r2"]})
    assert at_least_once_problems(b"r0\nr1\nr1\nr2\n", exp) == []
    assert at_least_once_problems(b"r0\nr2\n", exp) == ["missing (1): 'r1' (record 1 of a.txt)"]
    assert at_least_once_problems(b"r0\nr1\nr0r1\nr2\n", exp) == [
        "not a record: b'r0' at byte 6 of the published output (a torn or foreign write)"
    ]


def test_files_are_read_in_natural_order() -> None:
    names = ["part-10.txt", "part-2.txt", "part-1.txt", "d/part-0.txt"]
    assert sorted(names, key=natural_key) == [
        "d/part-0.txt",
        "part-1.txt",
        "part-2.txt",
        "part-10.txt",
    ]
