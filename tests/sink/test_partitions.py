"""Partitioned outputs: ``<dir>/country=DE/dt=2026-11-28/part-N.parquet``, read back as a
table by pyarrow's Hive partitioning; each partition's files roll by the limits, the open
partitions stay within max_open_files, values that would leave their directory are refused,
and crashes anywhere publish each record once."""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.common.columns import Columns
from operators.common.errors import BadRecordError
from operators.fs import LocalFileSystem
from operators.sink.manifest import read_manifests
from operators.sink.partitions import Partitioner, partition_of
from operators.sink.settings import SinkSettings
from operators.testing import ManualClock
from tests.landing import STEPS, SinkEnv, SinkRun, write_steps

SCHEMA = {"id": "int64", "country": "string", "at": "timestamp"}
COUNTRIES = ["DE", "FR", "IT", "ES", "PT"]


def records(n: int) -> list[dict[str, Any]]:
    start = datetime.datetime(2026, 11, 27, 22, 0)
    return [
        {
            "id": i,
            "country": COUNTRIES[(i * 7) % len(COUNTRIES)],
            "at": start + datetime.timedelta(minutes=37 * i),
        }
        for i in range(n)
    ]


def config(env: SinkEnv, **extra: Any) -> dict[str, Any]:
    return {
        "file": env.out + "/part-%FILENUM.parquet",
        "format": "parquet",
        "schema": SCHEMA,
        "partition_by": ["country", "dt"],
        "derived": {"dt": {"column": "at", "strftime": "%Y-%m-%d"}},
        **extra,
    }


def table(env: SinkEnv) -> list[dict[str, Any]]:
    """The output as a plain reader of a Hive-partitioned dataset reads it, by id."""
    if not env.fs.exists(env.out):
        return []
    dataset = ds.dataset(env.out, format="parquet", partitioning="hive")
    return sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"])


def expected(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "dt": r["at"].strftime("%Y-%m-%d")} for r in recs]


def files(env: SinkEnv) -> list[str]:
    out = []
    for directory, _, names in os.walk(env.out):
        rel = posixpath.relpath(directory, env.out)
        if rel.startswith("_"):
            continue
        out += [posixpath.normpath(posixpath.join(rel, n)) for n in names]
    return sorted(out)


def test_each_partition_gets_its_directories_and_files_rolled_by_the_limit(
    sink_local: SinkEnv,
) -> None:
    recs = records(60)
    run = SinkRun(sink_local, config(sink_local, tuples_per_file=4, manifest=True))
    for start in range(0, 60, 7):
        run.write(recs[start : start + 7])
        run.cut()
    run.stop()
    assert table(sink_local) == expected(recs)
    written = files(sink_local)
    assert all(n.startswith("country=") and "/dt=2026-11-" in n for n in written)
    for name in written:  # no partition column inside the files, at most 4 rows each
        rows = ds.dataset(sink_local.out + "/" + name, format="parquet").to_table()
        assert rows.schema.names == ["id", "at"] and rows.num_rows <= 4
    listed = [
        f
        for _, published in read_manifests(sink_local.fs, sink_local.out + "/_hdfs_sink/published")
        for f in published
    ]
    assert sorted(posixpath.relpath(f.path, sink_local.out) for f in listed) == written
    assert all(f.partition == partition_of(f.path, sink_local.out) for f in listed)
    assert {f.partition["country"] for f in listed if f.partition} == set(COUNTRIES)


def test_values_that_would_leave_their_directory_are_rejected_and_others_escaped(
    sink_local: SinkEnv,
) -> None:
    cfg = config(sink_local, rejects_file="_rejects/r-%FILENUM.jsonl")
    cfg["partition_by"] = ["country"]
    del cfg["derived"]
    recs = [
        {"id": 0, "country": "a/b"},
        {"id": 1, "country": ".."},
        {"id": 2, "country": "_hdfs_sink"},
        {"id": 3, "country": "x:y%z=w"},
        {"id": 4, "country": None},
        {"id": 5, "country": "."},
        {"id": 6, "country": "5\xa0km"},  # not NFKC: no directory may be named so
        {"id": 7, "country": "x" * 300},  # longer than a name may be
    ]
    run = SinkRun(sink_local, cfg)
    run.write(recs)
    run.stop()
    got = table(sink_local)
    assert [(r["id"], r["country"]) for r in got] == [(3, "x:y%z=w"), (4, None)]
    assert "country=x%3Ay%25z%3Dw" in " ".join(files(sink_local))
    (rejects,) = sink_local.published(sink_local.out + "/_rejects").values()
    reasons = [json.loads(line)["reason"] for line in rejects.decode().splitlines()]
    assert len(reasons) == 6
    assert all("would leave its directory" in r for r in reasons[:4])
    assert "NFKC" in reasons[4] and "partition 'country'" in reasons[5]


def test_open_partitions_stay_within_max_open_files(sink_local: SinkEnv) -> None:
    recs = records(50)
    run = SinkRun(sink_local, config(sink_local, max_open_files=2))
    for start in range(0, 50, 3):
        run.write(recs[start : start + 3])
        assert len(run.sink._open_files()) <= 2
        run.cut()
    run.stop()
    assert table(sink_local) == expected(recs)


def test_a_quiet_partition_is_published_after_close_idle_after(sink_local: SinkEnv) -> None:
    clock = ManualClock(1_000_000.0)
    run = SinkRun(sink_local, config(sink_local, close_idle_after=30), clock=clock)
    recs = records(2)  # two partitions
    run.write(recs[:1])
    clock.advance(20)
    run.write(recs[1:])
    clock.advance(15)  # the first partition's file is quiet for 35 s, the second for 15 s
    run.sink.on_tick(clock.now)
    run.cut()
    assert [r["id"] for r in table(sink_local)] == [0]


def test_a_derived_partition_needs_a_date_or_time(sink_local: SinkEnv) -> None:
    cfg = config(sink_local, rejects_file="_rejects/r-%FILENUM.jsonl")
    cfg["schema"] = {"id": "int64", "country": "string", "at": "string"}
    with pytest.raises(ValidationError, match="must be a date or timestamp column"):
        SinkSettings(**cfg)
    cfg["schema"] = SCHEMA
    run = SinkRun(sink_local, cfg)
    run.write(
        [
            {"id": 1, "country": "DE", "at": "2026-11-28T10:00:00"},
            {"id": 2, "country": "DE", "at": "soon"},
        ]
    )
    run.stop()
    assert [(r["id"], r["dt"]) for r in table(sink_local)] == [(1, "2026-11-28")]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"partition_by": ["nope", "dt"]}, "'nope' is not a column of"),
        ({"partition_by": ["country", "country", "dt"]}, "names a column twice"),
        ({"partition_by": ["../x", "dt"]}, "must be letters"),
        ({"format": "line", "schema": None}, "needs records with columns"),
        ({"file": "/o/part.parquet"}, "has no %FILENUM"),
        (
            {
                "derived": {
                    "dt": {"column": "at", "strftime": "%Y"},
                    "zz": {"column": "at", "strftime": "%Y"},
                }
            },
            "'zz' is not in partition_by",
        ),
    ],
)
def test_partition_settings_that_cannot_work_are_refused(
    sink_local: SinkEnv, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        SinkSettings(**{**config(sink_local), **given})


# -- property: random batches, cuts and crashes ------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    steps=st.lists(STEPS, max_size=25),
    limit=st.sampled_from([{}, {"tuples_per_file": 3}]),
    max_open=st.sampled_from([1, 2, 32]),
)
def test_every_record_is_published_once_in_its_partition_under_random_cuts_and_crashes(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[Any, ...]],
    limit: dict[str, int],
    max_open: int,
) -> None:
    env = SinkEnv(LocalFileSystem(), str(tmp_path_factory.mktemp("parts")))
    recs = records(120)
    write_steps(SinkRun(env, config(env, max_open_files=max_open, **limit)), recs, steps)
    assert table(env) == expected(recs)
    hidden = [n for n in files(env) if posixpath.basename(n).startswith(".")]
    assert hidden == []


def test_partitioning_changed_between_runs_never_appends_across_layouts(
    sink_local: SinkEnv,
) -> None:
    recs = records(10)
    flat = config(sink_local)
    flat["partition_by"] = []
    del flat["derived"]
    run = SinkRun(sink_local, flat)
    run.write(recs[:4])
    run.cut()  # a file of no partition is open at the cut
    run.settings = SinkSettings(**config(sink_local))
    run.crash()
    run.write(recs[4:])
    run.stop()
    written = files(sink_local)
    assert [n for n in written if "/" not in n] == ["part-0.parquet"]  # closed as it was
    assert all(n.startswith("country=") for n in written if n != "part-0.parquet")
    flat_rows = ds.dataset(sink_local.out + "/part-0.parquet", format="parquet").to_table()
    assert flat_rows.column("id").to_pylist() == [0, 1, 2, 3]


def test_a_time_zone_aware_timestamp_is_partitioned_by_its_utc_day(sink_local: SinkEnv) -> None:
    berlin = datetime.timezone(datetime.timedelta(hours=1))
    at = datetime.datetime(2026, 11, 29, 0, 30, tzinfo=berlin)  # 2026-11-28 23:30 UTC
    run = SinkRun(sink_local, config(sink_local))
    run.write([{"id": 1, "country": "DE", "at": at}])
    run.stop()
    (row,) = table(sink_local)
    assert (row["dt"], row["at"]) == ("2026-11-28", datetime.datetime(2026, 11, 28, 23, 30))


_COUNTRY = st.sampled_from(["DE", "FR", "", None, "a/b", "..", "%x=", "_hdfs_sink", "é", "e\u0301"])
_N = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["7", "007", " 2", "x", "1.5"]))
_AT = st.one_of(
    st.none(),
    st.datetimes(datetime.datetime(2026, 11, 27), datetime.datetime(2026, 11, 30)),
)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(st.tuples(_COUNTRY, _N, _AT), max_size=30),
    n_as_text=st.booleans(),
    columns=st.permutations(["country", "n", "day"]).map(lambda c: c[:2]),
)
def test_records_that_are_columns_go_to_the_partitions_records_one_by_one_go_to(
    rows: list[tuple[Any, Any, Any]], n_as_text: bool, columns: list[str]
) -> None:
    """The sink splits records that are columns a partition at a time: each lands in the
    directory, and each bad one is refused with the message, the record-at-a-time rule gives."""
    n_values = [
        (None if n is None else str(n)) if n_as_text else (n if isinstance(n, int) else None)
        for _, n, _ in rows
    ]
    table = pa.table(
        {
            "country": pa.array([c for c, _, _ in rows], pa.string()),
            "n": pa.array(n_values, pa.string() if n_as_text else pa.int64()),
            "at": pa.array([a for _, _, a in rows], pa.timestamp("us")),
        }
    )
    partitioner = Partitioner(
        columns, {"country": "string", "n": "int64"}, {"day": ("at", "%Y-%m-%d")}
    )
    records = Columns(table)
    groups, bad = partitioner.split(records)
    expected: dict[str, list[Any]] = {}
    refused = []
    for index, where in enumerate(partitioner.dirs(records.rows())):
        if isinstance(where, BadRecordError):
            refused.append((index, str(where), where.field))
        else:
            expected.setdefault(where, []).append(records[index])
    assert {k: list(v) for k, v in groups.items()} == expected
    assert list(groups) == list(expected)  # in the order of their first record
    assert [(i, str(e), e.field) for i, e in bad] == refused


def test_splitting_records_that_are_columns_does_not_import_pandas() -> None:
    """Arrow imports pandas (half a second) when it is handed a Python value or a numpy array;
    the split of every batch of a partitioned run hands it none, so a run never pays it."""
    code = """if True:
        import sys
        import pyarrow as pa, pyarrow.csv as csv
        from operators.common.columns import Columns
        from operators.sink.partitions import Partitioner
        table = csv.read_csv(pa.BufferReader(b'c,n\\na,1\\nb,2\\n,3\\na,4\\n'))
        groups, bad = Partitioner(["c"], {"c": "string", "n": "int64"}, {}).split(Columns(table))
        print({k: v.table.column("n").to_pylist() for k, v in groups.items()}, bad)
        print("pandas" in sys.modules)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    groups, pandas = done.stdout.splitlines()
    assert groups == "{'c=a': [1, 4], 'c=b': [2], 'c=__HIVE_DEFAULT_PARTITION__': [3]} []"
    assert pandas == "False"
