"""The example of the docs page "The testing toolkit" (docs/testing.md), verbatim."""

from hypothesis import given

from operators.testing import PipelineReplay, Schedule


def clean(line: str) -> str | None:
    """The transform under test: trim, upper-case, drop blank lines (deterministic)."""
    line = line.strip()
    return line.upper() if line else None


replay = PipelineReplay(
    transforms=[clean],
    sink={"file": "part-%FILENUM.csv", "tuples_per_file": 3},  # exactly_once, atomic publish
    scan={"late_window": "2s"},
)


@given(replay.schedules())
def test_clean_survives_crashes(schedule: Schedule) -> None:
    replay.check(schedule)


def test_clean_after_a_crash_during_publish() -> None:
    replay.check(
        "write a.txt (4 lines, mtime t0), b.txt (2 lines, mtime t0); run 2 batches; "
        "cut, crashing before the 1st rename in the output; run 3 batches"
    )


def test_with_the_fixture(pipeline_replay):
    result = pipeline_replay(
        "write a.txt (3 lines, mtime t0); run 1 batch; crash",
        sink={"file": "out-%FILENUM.txt"},
        transforms=[clean],
    )
    assert result.crashes == 1


def test_the_readme_shows_this_example_verbatim() -> None:
    from pathlib import Path

    here = Path(__file__)
    code = here.read_text().split("\n", 2)[2].lstrip("\n")
    code = code[: code.index("def test_the_readme_shows_this_example_verbatim")].rstrip() + "\n"
    readme = (here.parents[2] / "docs" / "testing.md").read_text()
    section = readme[readme.index("## Testing your pipeline") :]
    assert "```python\n" + code + "```" in section
