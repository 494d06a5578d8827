"""Column types of records with a schema, by the names users write in ``[sink.schema]``.

A schema is an ordered mapping of column name to type name: ``string``, ``int64``, ``int32``,
``double``, ``float``, ``bool``, ``date``, ``timestamp`` (microseconds, no time zone),
``binary`` and ``decimal(p,s)``. :func:`arrow_schema` turns it into the ``pyarrow.Schema``
every format writes; :func:`column` converts one column's values under the one rule of both
the text and the bulk formats: a value is kept only when it converts without loss (``1.5``
is not an ``int64``; ``"12"`` is), else the record is bad and its column and value are named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from operators.common.errors import short
from operators.common.lazy import lazy_module

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    pa = lazy_module("pyarrow")
    pc = lazy_module("pyarrow.compute")

__all__ = [
    "SCHEMA_TYPES",
    "BadValue",
    "arrow_schema",
    "arrow_type",
    "cast",
    "column",
    "schema_problem",
    "type_name",
]

#: Each simple type name and how Arrow makes its type (called at first use: pyarrow is imported
#: then, not by a run that has no schema).
_SIMPLE: dict[str, Callable[[], pa.DataType]] = {
    "string": lambda: pa.string(),
    "int64": lambda: pa.int64(),
    "int32": lambda: pa.int32(),
    "double": lambda: pa.float64(),
    "float": lambda: pa.float32(),
    "bool": lambda: pa.bool_(),
    "date": lambda: pa.date32(),
    "timestamp": lambda: pa.timestamp("us"),
    "binary": lambda: pa.binary(),
}


@cache
def _simple() -> dict[str, pa.DataType]:
    """The Arrow type of each simple type name."""
    return {name: make() for name, make in _SIMPLE.items()}


@cache
def _cast_errors() -> tuple[type[BaseException], ...]:
    """What pyarrow raises for a value that does not convert."""
    return (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)


_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
#: The type names, for messages and the configuration reference.
SCHEMA_TYPES = (*_SIMPLE, "decimal(p,s)")


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a type name; ValueError naming the name and the ones known."""
    key = name.strip().lower()
    if key in _SIMPLE:
        return _simple()[key]
    if match := _DECIMAL.fullmatch(key):
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            msg = f"{name!r}: a decimal needs 1 <= precision <= 38 and scale <= precision"
            raise ValueError(msg)
        return pa.decimal128(precision, scale)
    msg = f"unknown column type {name!r}; known: {', '.join(SCHEMA_TYPES)}"
    raise ValueError(msg)


def type_name(type_: pa.DataType) -> str:
    """The name users write for an Arrow type of :data:`SCHEMA_TYPES`."""
    for name, known in _simple().items():
        if known == type_:
            return name
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    return str(type_)


def schema_problem(schema: Mapping[str, str]) -> str | None:
    """Why ``schema`` cannot be used, or ``None``."""
    if not schema:
        return "has no column"
    for name, type_name in schema.items():
        if not name or name != name.strip():
            return f"has a column name {name!r} that is empty or starts or ends with a space"
        try:
            arrow_type(type_name)
        except ValueError as exc:
            return f"column {name!r}: {exc}"
    return None


def arrow_schema(schema: Mapping[str, str]) -> pa.Schema:
    """The ``pyarrow.Schema`` of a checked schema, columns in their given order."""
    return pa.schema([(name, arrow_type(type_name)) for name, type_name in schema.items()])


def column(values: Sequence[Any], field: pa.Field) -> pa.Array:
    """``values`` as an array of ``field``'s type, converted without loss. Raises
    ``ValueError`` naming the index of the first value that does not fit, its value and the
    column (``pyarrow`` alone would turn ``1.5`` into the ``int64`` 1)."""
    if pa.types.is_decimal(field.type):
        # A float goes through its shortest text: Arrow's float-to-decimal cast rounds 1.234
        # into decimal(10,2) without a word, the text's cast refuses it.
        values = [repr(v) if type(v) is float else v for v in values]
    try:
        return _cast(pa.array(values, from_pandas=False), field.type)
    except _cast_errors():
        pass
    # Find the value that does not fit; when each fits alone (a mix such as 1 and "2", which
    # pyarrow cannot infer one type for), the column is built value by value.
    pieces = []
    for index, value in enumerate(values):
        try:
            pieces.append(_cast(pa.array([value], from_pandas=False), field.type))
        except _cast_errors() as exc:
            raise BadValue(index, field.name, value, field.type, exc) from None
    return pa.concat_arrays(pieces) if pieces else pa.array([], type=field.type)


def cast(array: pa.Array, field: pa.Field) -> pa.Array:
    """An Arrow column as ``field``'s type under :func:`column`'s rule (``BadValue`` for the
    first value that does not fit): the vectorized form, for records that are already
    columns."""
    if array.type == field.type:
        return array
    if not pa.types.is_decimal(field.type) or not pa.types.is_floating(array.type):
        try:
            return _cast(array, field.type)
        except _cast_errors():
            pass
    return column(array.to_pylist(), field)  # finds the value, by the rule for values


def _cast(array: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A safe cast; a number's text may have spaces or tabs around it (``" 7"`` is 7, as
    Arrow's, DuckDB's and pandas's CSV readers read it: trimming a number loses nothing)."""
    if _is_number(type_) and pa.types.is_string(array.type):
        array = pc.utf8_trim(array, characters=" \t")
    return array.cast(type_, safe=True)


def _is_number(type_: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_decimal(type_)
    )


class BadValue(ValueError):
    """A value that does not fit its column: ``index`` in the values given, ``name`` of the
    column, the ``value``."""

    def __init__(
        self, index: int, name: str, value: Any, type_: pa.DataType, cause: BaseException
    ) -> None:
        reason = str(cause).split("\n", 1)[0]
        super().__init__(f"column {name!r}: {short(value)} is not a {type_name(type_)} ({reason})")
        self.index = index
        self.name = name
        self.value = value
