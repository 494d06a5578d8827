"""SinkSettings: IBM aliases, exclusive options, and errors that name the field and the value."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from operators.fs import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from region.errors import ConfigError


def test_a_sink_given_only_a_file_writes_utf8_lines_exactly_once_published_atomically() -> None:
    s = SinkSettings(file="/out/part-%FILENUM")
    assert (s.format, s.delivery, s.publish, s.encoding) == (
        "line",
        "exactly_once",
        "atomic",
        "utf-8",
    )
    assert s.permission == 0o640 and s.time_format == "yyyyMMdd_HHmmss"
    assert s.tuples_per_file is s.bytes_per_file is s.time_per_file is None
    assert not s.close_on_punct


def test_ibm_camel_case_names_are_aliases() -> None:
    s = SinkSettings.model_validate(
        {
            "file": "/o/%TIME-%FILENUM",
            "timeFormat": "yyyy",
            "timePerFile": "2m",
            "closeOnPunct": True,
        }
    )
    assert (s.time_format, s.time_per_file, s.close_on_punct) == ("yyyy", 120.0, True)
    assert (
        SinkSettings.model_validate({"file": "/o/x-%FILENUM", "tuplesPerFile": 5}).tuples_per_file
        == 5
    )
    assert (
        SinkSettings.model_validate({"file": "/o/x-%FILENUM", "bytesPerFile": 9}).bytes_per_file
        == 9
    )
    attr = SinkSettings.model_validate({"fileAttributeName": "f", "directory": "/o"})
    assert attr.file_attribute_name == "f"


def test_frozen_and_no_unknown_fields() -> None:
    s = SinkSettings(file="/o/x")
    with pytest.raises(ValidationError):
        s.file = "/other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="tempFile"):
        SinkSettings.model_validate({"file": "/o/x", "tempFile": "t"})


@pytest.mark.parametrize(
    ("kw", "fragments"),
    [
        ({"tuples_per_file": 5, "bytes_per_file": 10}, ["tuples_per_file=5", "bytes_per_file=10"]),
        ({"bytesPerFile": 10, "timePerFile": "5s"}, ["bytes_per_file=10", "time_per_file=5.0"]),
        ({"tuples_per_file": 0}, ["tuples_per_file", "0"]),
        ({"bytes_per_file": -1}, ["bytes_per_file", "-1"]),
        ({"time_per_file": "0s"}, ["time_per_file=0.0"]),
        ({"time_per_file": "soon"}, ["time_per_file", "soon"]),
        ({"encoding": "klingon"}, ["encoding", "klingon"]),
        ({"format": "csv"}, ["format", "csv"]),
        ({"delivery": "maybe"}, ["delivery", "maybe"]),
        ({"permission": "rw-"}, ["permission", "rw-"]),
        ({"permission": 0o1777}, ["permission", "0o1777"]),
        ({"file": "/o/x-%FOO"}, ["%FOO", "/o/x-%FOO"]),
        ({"file": "/o/%TIME", "time_format": "yyyyQ"}, ["'Q'", "yyyyQ"]),
        ({"file": "/o/.hidden-%FILENUM"}, ["file=", ".hidden"]),
        ({"file": "/o/"}, ["file='/o/'"]),
        ({"file": "/abs/x", "directory": "/o"}, ["file='/abs/x'", "directory='/o'"]),
    ],
)
def test_bad_values_name_the_field_and_the_value(kw: dict[str, Any], fragments: list[str]) -> None:
    values = {"file": "/o/part-%FILENUM", **kw}
    with pytest.raises(ValidationError) as info:
        SinkSettings.model_validate(values)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("kw", "fragments"),
    [
        ({"file": "/o/x", "directory": "/o"}, ["file='/o/x'", "file_attribute_name='f'"]),
        ({"tuples_per_file": 3, "directory": "/o"}, ["tuples_per_file=3", "file_attribute_name"]),
        ({}, ["file_attribute_name='f'", "directory="]),
    ],
)
def test_file_attribute_name_excludes_file_and_limits(
    kw: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(ValidationError) as info:
        SinkSettings.model_validate({"file_attribute_name": "f", **kw})
    for fragment in fragments:
        assert fragment in str(info.value)


def test_file_or_file_attribute_name_is_required() -> None:
    with pytest.raises(ValidationError, match="file=None"):
        SinkSettings()


def test_permission_accepts_octal_strings() -> None:
    assert SinkSettings(file="/o/x", permission="0600").permission == 0o600  # type: ignore[arg-type]
    assert SinkSettings(file="/o/x", permission="0o644").permission == 0o644  # type: ignore[arg-type]


def test_directory_is_joined_to_a_relative_template() -> None:
    assert SinkSettings(file="p-%FILENUM", directory="/o").template == "/o/p-%FILENUM"
    assert SinkSettings(file="/o/p").template == "/o/p"
    assert SinkSettings(file_attribute_name="f", directory="/o").template is None


def test_sink_name_must_be_safe_in_file_names() -> None:
    with pytest.raises(ConfigError, match="'a~b'"):
        HDFS2FileSink(SinkSettings(file="/o/x"), LocalFileSystem(), name="a~b")
    with pytest.raises(ConfigError, match="'a/b'"):
        HDFS2FileSink(SinkSettings(file="/o/x"), LocalFileSystem(), name="a/b")


def test_rolling_to_one_fixed_name_is_refused_with_the_settings() -> None:
    """It used to start, then fail after five resets with 'p.txt already exists' and leave an
    in-progress file behind."""
    for limit in ({"tuples_per_file": 2}, {"bytes_per_file": 9}, {"close_on_punct": True}):
        with pytest.raises(ValidationError, match=r"'/o/p.txt' has no %FILENUM but"):
            SinkSettings.model_validate({"file": "/o/p.txt", **limit})
    SinkSettings(file="/o/p.txt")  # no rolling: one file


@pytest.mark.parametrize(
    "limit",
    [
        {"tuples_per_file": 2},
        {"bytes_per_file": 9},
        {"close_on_punct": True},
        {"time_per_file": 60},
        {"time_per_file": 1, "time_format": "yyyyMMdd_HHmmss.SSS"},
    ],
    ids=str,
)
def test_rolling_to_time_names_without_filenum_is_refused_naming_what_to_add(
    limit: dict[str, Any],
) -> None:
    """%TIME alone repeats: two files within one step of time_format, a stop and a restart
    within one step, a clock set back (local time repeats an hour each autumn). It used to
    start and then fail at run time with 'already exists'."""
    with pytest.raises(ValidationError) as info:
        SinkSettings.model_validate({"file": "/o/f-%TIME.txt", **limit})
    message = str(info.value)
    assert "file='/o/f-%TIME.txt' has no %FILENUM" in message
    assert "add %FILENUM (e.g. '/o/f-%TIME-%FILENUM.txt')" in message
    SinkSettings.model_validate({"file": "/o/f-%TIME-%FILENUM.txt", **limit})


def test_an_idle_file_is_closed_after_a_minute_by_default_and_never_only_when_asked() -> None:
    """What a default must not do: keep records read unpublished for ever when input pauses."""
    assert SinkSettings(file="o-%FILENUM").rolling.idle == 60.0
    assert SinkSettings(file="o-%FILENUM", close_idle_after="5s").rolling.idle == 5.0
    assert SinkSettings(file="o-%FILENUM", close_idle_after="never").rolling.idle is None
    for bad in ("0s", "-1", "soon"):
        with pytest.raises(ValidationError, match="close_idle_after"):
            SinkSettings(file="o-%FILENUM", close_idle_after=bad)
    policy = SinkSettings(file="o-%FILENUM", close_idle_after="5s").rolling
    assert not policy.quiet(100.0, 104.9) and policy.quiet(100.0, 105.0)
