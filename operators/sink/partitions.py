"""Hive-style partitions of a sink's output: ``<root>/country=DE/dt=2026-11-28/<file>``.

``[sink] partition_by`` names the partition columns, in directory order. A column is either a
column of the records (converted to its ``[sink.schema]`` type first, so that ``"007"`` and
``7`` of an ``int64`` column are one partition) or derived from a date or timestamp column by a
strftime pattern (``[sink.derived]``). Partition columns that are record columns are not
written into the files (as Hive, Spark and pyarrow's datasets expect; they read them back
from the directory names).

A value becomes a directory name by one rule:

- ``None`` or ``""`` is Hive's ``__HIVE_DEFAULT_PARTITION__``;
- a date is ``YYYY-MM-DD``, a timestamp ISO 8601, a bool ``true`` / ``false``;
- a value with ``/``, or that is ``.`` or ``..``, or the sink's own folder ``_hdfs_sink``, is
  refused: the record is bad (``on_bad_record``), as a file name from a record is; so is one
  the rule of names from records refuses (too long, not in Unicode NFKC form, invisible
  characters);
- other characters that are special in paths or URIs (``:``, ``%``, ``=``, ``#``, control
  characters, ...) are escaped as ``%XX``, as Hive and Spark do (their readers, and pyarrow's
  ``partitioning="hive"``, unescape them).
"""

from __future__ import annotations

import datetime
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from operators.common.columns import Columns
from operators.common.errors import BadRecordError, short
from operators.common.lazy import lazy_module
from operators.common.safepath import name_problem
from operators.common.schema import BadValue, arrow_schema, cast, column
from operators.sink.owner import SINK_DIR

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    np = lazy_module("numpy")
    pa = lazy_module("pyarrow")
    pc = lazy_module("pyarrow.compute")


__all__ = ["DEFAULT_PARTITION", "Partitioner", "partition_of"]

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Escaped as %XX in values: Hive's FileUtils.escapePathName set (and control characters).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^")


def _escape(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or c < " " else c for c in text)


class Partitioner:
    """The partition directory of each record (see the module doc)."""

    def __init__(
        self,
        columns: Sequence[str],
        schema: Mapping[str, str] | None,
        derived: Mapping[str, tuple[str, str]],
    ) -> None:
        self.columns = tuple(columns)
        #: ``name -> (source column, strftime pattern)``.
        self._derived = dict(derived)
        typed = {c: schema[c] for c in self.columns if schema and c in schema}
        self._fields = {f.name: f for f in arrow_schema(typed)} if typed else {}

    def dirs(self, records: Sequence[Any]) -> list[str | BadRecordError]:
        """The relative partition directory of each record, or the error that makes it bad."""
        out: list[str | BadRecordError] = [""] * len(records)
        values: dict[str, list[Any]] = {}
        for name in self.columns:
            source = self._derived[name][0] if name in self._derived else name
            values[name] = [r.get(source) if isinstance(r, Mapping) else None for r in records]
        for i, record in enumerate(records):
            if not isinstance(record, Mapping):
                msg = f"record {i}: a partitioned sink needs a mapping, got {short(record)}"
                out[i] = BadRecordError(msg, offset=i)
        for name, field in self._fields.items():  # typed as the schema says
            column_values = values[name]
            while True:
                try:
                    values[name] = column(column_values, field).to_pylist()
                    break
                except BadValue as exc:
                    msg = f"record {exc.index}: partition {exc}"
                    out[exc.index] = BadRecordError(msg, offset=exc.index, field=name)
                    column_values = list(column_values)
                    column_values[exc.index] = None
        # A batch holds few partitions: each distinct value is named (or refused) once, not
        # once per record.
        known: dict[tuple[str, Any, type], str | ValueError] = {}
        for i in range(len(records)):
            if isinstance(out[i], BadRecordError):
                continue
            parts = []
            for name in self.columns:
                text = self._known_text(known, name, values[name][i])
                if isinstance(text, ValueError):
                    out[i] = BadRecordError(f"record {i}: {text}", offset=i, field=name)
                    break
                parts.append(f"{name}={text}")
            else:
                out[i] = "/".join(parts)
        return out

    def split(
        self, records: Columns
    ) -> tuple[dict[str, Columns], list[tuple[int, BadRecordError]]]:
        """What :meth:`dirs` says of records that are columns, a partition at a time: the
        records of each partition directory (in the order of their first record, each in its
        order), and the bad records by index. Each distinct value is named once, by the same
        rule; records whose values do not convert go the way of :meth:`dirs`."""
        table = records.table
        n = len(records)
        known: dict[tuple[str, Any, type], str | ValueError] = {}
        # Numbers in numpy, handed to Arrow as buffers: a Python value or a numpy array given
        # to Arrow makes it import pandas (half a second of a run) to ask whether the value is
        # one of its arrays.
        picked: list[tuple[list[str | ValueError], np.ndarray]] = []
        group = np.zeros(n, np.int64)
        for name in self.columns:
            source = self._derived[name][0] if name in self._derived else name
            index = table.schema.get_field_index(source)
            array = table.column(index).combine_chunks() if index >= 0 else pa.nulls(n)
            if name in self._fields:
                try:
                    array = cast(array, self._fields[name])
                except BadValue:
                    return self._split_records(records)
            encoded = array.dictionary_encode()
            # The directory name of each distinct value (values of one name, such as two times
            # of one day, are one partition); a refusal is kept as the name. A null is the
            # last value.
            ids: dict[str | ValueError, int] = {}
            of_value = np.array(
                [
                    ids.setdefault(self._known_text(known, name, v), len(ids))
                    for v in [*encoded.dictionary.to_pylist(), None]
                ],
                np.int64,
            )
            code = of_value[_ints(encoded.indices)]
            picked.append((list(ids), code))
            # The partition so far, numbered densely in the order of first appearance (so
            # that numbers stay small).
            combined = _array(group * len(ids) + code)
            group = _ints(combined.dictionary_encode().indices)
        # One stable sort by partition number (numbered in the order of first appearance), then
        # a slice per partition: a batch spanning many partitions costs one pass, not one per
        # partition.
        numbers = _array(group)
        order = pc.sort_indices(numbers)
        ordered = table.take(order)
        counts = dict(
            zip(*(c.to_pylist() for c in pc.value_counts(numbers).flatten()), strict=True)
        )
        groups: dict[str, Columns] = {}
        bad: list[tuple[int, BadRecordError]] = []
        start = 0
        for number in range(len(counts)):
            count = counts[number]
            first = order[start].as_py()
            parts: list[str] = []
            for name, (names, code) in zip(self.columns, picked, strict=True):
                text = names[int(code[first])]
                if isinstance(text, ValueError):
                    for i in order.slice(start, count).to_pylist():
                        bad.append((i, BadRecordError(f"record {i}: {text}", offset=i, field=name)))
                    break
                parts.append(f"{name}={text}")
            else:
                groups["/".join(parts)] = Columns(ordered.slice(start, count))
            start += count
        bad.sort(key=lambda b: b[0])
        return groups, bad

    def _split_records(
        self, records: Columns
    ) -> tuple[dict[str, Columns], list[tuple[int, BadRecordError]]]:
        """:meth:`split` by :meth:`dirs`, for records whose values need it."""
        table = records.table
        rows: dict[str, list[int]] = {}
        bad: list[tuple[int, BadRecordError]] = []
        for index, where in enumerate(self.dirs(records.rows())):
            if isinstance(where, BadRecordError):
                bad.append((index, where))
            else:
                rows.setdefault(where, []).append(index)
        return {w: Columns(table.take(pa.array(r, pa.int64()))) for w, r in rows.items()}, bad

    def _known_text(
        self, known: dict[tuple[str, Any, type], str | ValueError], name: str, value: Any
    ) -> str | ValueError:
        """:meth:`_text` of ``value``, or why it has none, kept in ``known`` (``True`` and ``1``
        are apart: their names differ)."""
        key = (name, value, type(value))
        try:
            found = known.get(key)
        except TypeError:  # not hashable: named alone, not kept
            return self._text_or_why(name, value)
        if found is None:
            found = known[key] = self._text_or_why(name, value)
        return found

    def _text_or_why(self, name: str, value: Any) -> str | ValueError:
        try:
            return self._text(name, value)
        except ValueError as exc:
            return exc

    def _text(self, name: str, value: Any) -> str:
        if name in self._derived:
            source, pattern = self._derived[name]
            if value is None:
                return DEFAULT_PARTITION
            if isinstance(value, str):
                try:
                    value = datetime.datetime.fromisoformat(value)
                except ValueError:
                    raise ValueError(
                        f"partition {name!r}: {source!r} is {short(value)}, not a date or time"
                    ) from None
            if not isinstance(value, datetime.date):
                msg = f"partition {name!r}: {source!r} is {short(value)}, not a date or time"
                raise ValueError(msg)
            if isinstance(value, datetime.datetime) and value.tzinfo is not None:
                # A timestamp column stores it in UTC: its partition is UTC's too.
                value = value.astimezone(datetime.UTC).replace(tzinfo=None)
            value = value.strftime(pattern)
        if value is None or value == "":
            return DEFAULT_PARTITION
        if isinstance(value, bool):
            return "true" if value else "false"
        text = value.isoformat() if isinstance(value, datetime.date) else str(value)
        if "/" in text or text in (".", "..", SINK_DIR):
            msg = (
                f"partition {name!r}: the value {short(value)} would leave its directory "
                "(a '/', '.', '..' or the sink's own folder)"
            )
            raise ValueError(msg)
        escaped = _escape(text)
        # The rule of names from records (length, Unicode form, invisible characters): a
        # value no directory can be named after is a bad record, not a stopped run.
        problem = name_problem(f"{name}={escaped}", visible=True)
        if problem is not None:
            raise ValueError(f"partition {name!r}: the value {short(value)} {problem}")
        return escaped


def _ints(array: pa.Array) -> np.ndarray:
    """An Arrow array of integers as numpy ``int64``, a null as -1, read from its buffers
    (``Array.to_numpy`` imports pandas too)."""
    validity, values = array.buffers()[:2]
    n, offset = len(array), array.offset
    out = np.frombuffer(
        values, np.dtype(f"int{array.type.bit_width}"), n, offset * array.type.bit_width // 8
    ).astype(np.int64)
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        out[~bits[offset : offset + n].astype(bool)] = -1
    return out


def _array(values: np.ndarray) -> pa.Array:
    """``int64`` numbers as an Arrow array over their buffer (``pa.array`` imports pandas)."""
    data = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def partition_of(final: str, root: str) -> dict[str, str | None] | None:
    """The partition values of a file written below ``root``, read back from its directory
    names (unescaped; Hive's default partition is ``None``), or ``None`` when it is directly in
    ``root``."""
    rel = posixpath.relpath(posixpath.dirname(final), root)
    if rel in (".", ""):
        return None
    out: dict[str, str | None] = {}
    for part in rel.split("/"):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = None if value == DEFAULT_PARTITION else unquote(value)
    return out or None
