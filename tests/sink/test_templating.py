"""File-name templates: every IBM variable, %PARTITION, Java and strftime time formats."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from operators.sink.templating import FileNameTemplate
from region.errors import ConfigError

# 2024-03-05 07:08:09.045 local time (the tests pin the zone below).
NOW_FIELDS = (2024, 3, 5, 7, 8, 9, 45_000)


@pytest.fixture
def zone() -> Iterator[None]:
    """Local time is UTC-5 with no daylight saving (a POSIX TZ string: no tz database needed)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "EST+5"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def now(zone: None) -> float:
    return datetime(*NOW_FIELDS).timestamp()


def render(template: str, now: float, time_format: str = "yyyyMMdd_HHmmss", **kw: object) -> str:
    return FileNameTemplate(template, time_format).render(filenum=7, now=now, **kw)  # type: ignore[arg-type]


def test_every_variable_is_substituted(now: float) -> None:
    out = FileNameTemplate(
        "/out/%HOST/%PROCID/%PEID/%PELAUNCHNUM/%PARTITION/%FILENUM/%TIME.txt"
    ).render(filenum=12, now=now, partition=3, peid="pe9", pelaunchnum=2)
    host = socket.gethostname()
    assert out == f"/out/{host}/{os.getpid()}/pe9/2/3/12/20240305_070809.txt"


def test_runtime_variables_render_as_zero_outside_a_job(now: float) -> None:
    template = FileNameTemplate("p%PARTITION-e%PEID-l%PELAUNCHNUM")
    assert template.render(filenum=0, now=now) == "p0-e0-l0"


def test_uses_flags_and_static_prefix() -> None:
    template = FileNameTemplate("/out/dir/part-%FILENUM.txt")
    assert template.uses_filenum and not template.uses_time and not template.uses_partition
    assert template.static_prefix == "/out/dir/part-"
    plain = FileNameTemplate("/out/a.txt")
    assert not plain.uses_filenum and plain.static_prefix == "/out/a.txt"
    assert FileNameTemplate("x-%TIME-%PARTITION").variables == {"TIME", "PARTITION"}


def test_variable_names_are_matched_longest_first(now: float) -> None:
    # %PELAUNCHNUM must not be read as %PE + text, and %FILENUMS is %FILENUM then "S".
    assert render("%PELAUNCHNUM_%PEID_%FILENUMS", now, pelaunchnum=4, peid="x") == "4_x_7S"


def test_double_percent_is_a_literal_percent(now: float) -> None:
    assert render("100%%-%FILENUM", now) == "100%-7"


@pytest.mark.parametrize(
    ("template", "token"),
    [
        ("out-%FOO.txt", "%FOO"),
        ("out-%.txt", "%."),
        ("out-%", "%"),
        ("%PE-x", "%PE"),
        ("%filenum", "%filenum"),
    ],
)
def test_unknown_token_is_a_config_error_naming_token_and_template(
    template: str, token: str
) -> None:
    with pytest.raises(ConfigError) as info:
        FileNameTemplate(template)
    assert repr(token) in str(info.value)
    assert repr(template) in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("yyyyMMdd_HHmmss", "20240305_070809"),
        ("yyyy-MM-dd'T'HH.mm.ss.SSS", "2024-03-05T07.08.09.045"),
        ("yy/M/d H:m:s S", "24/3/5 7:8:9 45"),
        ("SSSSSS", "000045"),  # Java pads milliseconds; it is not microseconds
        ("EEE EEEE MMM MMMM", "Tue Tuesday Mar March"),
        ("hh a, KK k", "07 AM, 07 7"),
        ("D u w", "65 2 10"),
        ("Z XXX X", "-0500 -05:00 -05"),
        ("'at' HH 'o''clock' ''", "at 07 o'clock '"),
        ("G yyyy", "AD 2024"),
    ],
)
def test_java_time_patterns_render_as_java_renders_them(
    now: float, pattern: str, expected: str
) -> None:
    assert render("%TIME", now, pattern) == expected


def test_strftime_formats_are_accepted(now: float) -> None:
    assert render("%TIME", now, "%Y-%m-%d_%H%M%S.%f") == "2024-03-05_070809.045000"


@pytest.mark.parametrize("pattern", ["yyyyQQ", "yyyy-MM-dd 'T", "bb"])
def test_bad_java_pattern_is_a_config_error_naming_it(pattern: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileNameTemplate("%TIME", pattern)
    assert repr(pattern) in str(info.value)


def test_pm_and_midnight_hours(zone: None) -> None:
    late = datetime(2024, 3, 5, 23, 0, 0).timestamp()
    midnight = datetime(2024, 3, 5, 0, 30, 0).timestamp()
    assert render("%TIME", late, "h a k K H") == "11 PM 23 11 23"
    assert render("%TIME", midnight, "hh a kk KK HH") == "12 AM 24 00 00"
