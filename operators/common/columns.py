"""Records with a schema kept as Arrow columns while nothing needs them one by one.

A source that reads rows with a schema hands its records on as :class:`Columns`: a
``Sequence`` of mappings, as any batch's records are, so a per-record transform, a line sink
or a rejects file sees each record as the ``dict`` it always did (made a record batch at a
time, when first asked for). What knows columns takes the Arrow table instead, and no record
becomes a Python object between the source's parse and the sink's file: the sink's encoder of
records with columns, and its partitioner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from operators.common.lazy import lazy_module

if TYPE_CHECKING:
    import pyarrow as pa
else:
    pa = lazy_module("pyarrow")


__all__ = ["Columns", "OverColumns"]


class Columns(Sequence[dict[str, Any]]):
    """Records as the rows of an Arrow table (see the module doc); immutable."""

    __slots__ = ("_rows", "table")

    def __init__(self, table: pa.Table | pa.RecordBatch) -> None:
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        #: The records' columns.
        self.table: pa.Table = table
        self._rows: list[dict[str, Any]] | None = None

    @classmethod
    def empty(cls, schema: pa.Schema) -> Columns:
        return cls(pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema))

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> Columns: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | Columns:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return Columns(self.table.take(list(range(start, stop, step))))
            return Columns(self.table.slice(start, max(0, stop - start)))
        if self._rows is not None:
            return self._rows[index]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"record {index} of {n}")
        row: dict[str, Any] = self.table.slice(index % n, 1).to_pylist()[0]
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._rows is not None:
            return iter(self._rows)
        return self._iter()

    def _iter(self) -> Iterator[dict[str, Any]]:
        for batch in self.table.to_batches():
            yield from batch.to_pylist()

    def rows(self) -> list[dict[str, Any]]:
        """The records as dicts (made once)."""
        if self._rows is None:
            self._rows = self.table.to_pylist()
        return self._rows

    def __add__(self, other: Iterable[Any]) -> Columns:
        if isinstance(other, Columns):
            if not len(other):
                return self
            if not len(self):
                return other
            return Columns(pa.concat_tables([self.table, other.table]))
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same records (a list of dicts included)."""
        if isinstance(other, Columns):
            return bool(self.table.equals(other.table))
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(other) == len(self) and list(other) == self.rows()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Columns({len(self)} records: {', '.join(self.schema.names)})"


class OverColumns:
    """A function of a ``pyarrow.RecordBatch`` (the records' columns) as a transform of a
    batch's records: called once per batch (``over_batch``), not once per record; it returns
    a record batch (or table) of the records to write, which may have other columns or rows."""

    over_batch = True

    def __init__(self, function: Callable[[pa.RecordBatch], Any], name: str) -> None:
        self._function = function
        self._name = name

    def __call__(self, records: Sequence[Any]) -> Columns:
        if isinstance(records, Columns):
            table = records.table
        else:
            table = pa.Table.from_pylist(list(records))
        batch = pa.RecordBatch.from_arrays(
            [c.combine_chunks() for c in table.columns], schema=table.schema
        )
        out = self._function(batch)
        if isinstance(out, pa.RecordBatch | pa.Table):
            return Columns(out)
        msg = (
            f"{self._name} returned {type(out).__name__}, not a pyarrow.RecordBatch "
            "(vectorized = true: it takes and returns the records' columns)"
        )
        raise TypeError(msg)

    def __repr__(self) -> str:
        return f"OverColumns({self._name})"
