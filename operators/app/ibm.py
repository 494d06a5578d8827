"""Parity with IBM Streams' HDFS toolkit: every parameter, port and metric of its operators,
with our name for it and whether we support it, support it differently, or not at all.

Written by hand from the toolkit's Java sources (``@Parameter``, ``@InputPortSet``,
``@OutputPortSet``, the custom metrics each operator creates, ``IHdfsConstants.java``) at
:data:`TOOLKIT`. ``tests/test_ibm_parity.py`` checks every row that claims support against our
settings models, operators and metrics, and that the "IBM parameters" section of
``docs/ibm-migration.md`` is
:func:`markdown` of this registry: after editing a row, run ``python -m operators.app.ibm --write
docs/ibm-migration.md``. ``--json`` prints the rows for other tools.

Editing: add or change a row with :func:`supported`, :func:`different`, :func:`unsupported`,
:func:`port` or :func:`metric` in its group. A parameter row that names ours gives an
``example`` value (not the default) the test passes under the IBM name and under ours, and, when
the model needs other fields to be valid, ``context``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = [
    "BEGIN",
    "COPY",
    "END",
    "GROUPS",
    "IN_PROGRESS",
    "OPERATORS",
    "REGION",
    "SCAN",
    "SHARED",
    "SINK",
    "SOURCE",
    "TOOLKIT",
    "Group",
    "Kind",
    "Row",
    "Status",
    "different",
    "markdown",
    "metric",
    "port",
    "records",
    "replace_section",
    "rows_of",
    "section_of",
    "supported",
    "unsupported",
]

#: The toolkit release the rows were read from.
TOOLKIT = "IBMStreams/streamsx.hdfs v5.3.4"
#: The docs section :func:`markdown` fills lies between these two lines.
BEGIN = "<!-- ibm-parity:begin -->"
END = "<!-- ibm-parity:end -->"
#: The reason of rows another change is adding right now (flip them when it lands).
IN_PROGRESS = "in progress"
#: Example settings files shipped with the project (a credentials file's example lives there).
_CONF = Path(__file__).resolve().parents[2] / "conf"


class Status(StrEnum):
    SUPPORTED = "supported"
    #: Ours does the same job consciously differently; the row says how in one line.
    DIFFERENT = "different"
    UNSUPPORTED = "unsupported"


class Kind(StrEnum):
    PARAMETER = "parameter"
    INPUT = "input port"
    OUTPUT = "output port"
    METRIC = "metric"


@dataclass(frozen=True)
class Row:
    """One IBM name. ``ours`` is, for a parameter, the field of the group's settings model; for
    a port, a method, constructor keyword or settings field of our operator; for a metric, a
    key of our operator's ``metrics``. ``note`` is the reason of a different or unsupported
    row, or where a supported one is available."""

    kind: Kind
    ibm: str
    ours: str | None
    status: Status
    note: str = ""
    #: A value (not the field's default) the test gives under the IBM name and under ours.
    example: Any = None
    #: What ``example`` reads back as, when the model changes it (e.g. an enum's spelling).
    expect: Any = None
    #: Other fields the settings model needs to accept ``example`` (``None`` removes a field
    #: the group's base sets).
    context: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: The field ``example`` lands in when it is not ``ours`` (a JSON of several settings).
    lands_in: str | None = None


@dataclass(frozen=True)
class Group:
    """An IBM operator (or the parameters its operators share) and where ours lives."""

    ibm: str
    #: ``module:Class`` of our operator (``None``: parameters only).
    operator: str | None
    #: ``module:Class`` of the settings model the parameter rows are checked against.
    settings: str
    #: The TOML table of the settings, when there is one.
    table: str | None
    rows: tuple[Row, ...]
    #: Fields every ``example`` is validated with (the model's required ones).
    base: Mapping[str, Any] = field(default_factory=dict)
    #: One line under the table's heading.
    about: str = ""
    #: The group's operator also takes the shared (``AbstractHdfsOperator``) parameters.
    shares: bool = True


def supported(
    ibm: str, ours: str, example: Any, note: str = "", *, expect: Any = None, **context: Any
) -> Row:
    return Row(Kind.PARAMETER, ibm, ours, Status.SUPPORTED, note, example, expect, context)


def different(ibm: str, ours: str, example: Any, why: str, **context: Any) -> Row:
    return Row(Kind.PARAMETER, ibm, ours, Status.DIFFERENT, why, example, None, context)


def unsupported(ibm: str, why: str) -> Row:
    return Row(Kind.PARAMETER, ibm, None, Status.UNSUPPORTED, why)


def port(kind: Kind, ibm: str, ours: str | None, status: Status, note: str) -> Row:
    return Row(kind, ibm, ours, status, note)


def metric(ibm: str, ours: str | None, status: Status, note: str = "") -> Row:
    return Row(Kind.METRIC, ibm, ours, status, note)


S, D, U = Status.SUPPORTED, Status.DIFFERENT, Status.UNSUPPORTED
IN, OUT = Kind.INPUT, Kind.OUTPUT

#: ``AbstractHdfsOperator``'s parameters (every operator of the toolkit takes them) and
#: ``vmArg``, which every Java operator of IBM Streams takes. Ours are one ``[filesystem]``
#: per pipeline.
SHARED = Group(
    "AbstractHdfsOperator",
    None,
    "operators.fs.settings:FileSystemSettings",
    "[filesystem]",
    (
        supported(
            "hdfsUri",
            "uri",
            "webhdfs://nn:9870",
            "default `fs.defaultFS` of `config_dir` (or `HADOOP_CONF_DIR`) as IBM, the local disk "
            "when none names one; a path may carry its own URI",
        ),
        supported("hdfsUser", "user", "etl"),
        supported("hdfsPassword", "password", "s3cret"),
        supported("reconnectionPolicy", "reconnection_policy", "InfiniteRetry"),
        different(
            "reconnectionBound",
            "retries",
            7,
            "retries after a failure of any call, not only at connect (default 3, IBM 5)",
        ),
        different(
            "reconnectionInterval",
            "retry_backoff",
            2.5,
            "first wait, doubled per retry (default 0.5 s, IBM a fixed 10 s)",
        ),
        supported("authPrincipal", "kerberos_principal", "etl@EXAMPLE.COM"),
        supported("authKeytab", "keytab", "/etc/etl.keytab", kerberos_principal="etl@EXAMPLE.COM"),
        Row(
            Kind.PARAMETER,
            "credFile",
            "cred_file",
            Status.SUPPORTED,
            "IBM's keys (user, password, webhdfs) fill `user`, `password`, `uri`",
            str(_CONF / "credentials.example.json"),
            "etl",
            {},
            lands_in="user",
        ),
        supported("configPath", "config_dir", "/tmp"),
        supported(
            "keyStorePath",
            "ca_bundle",
            "/etc/ssl/certs/ca-certificates.crt",
            "a PEM bundle, or PKCS12 with `key_store_password`; JKS is refused with the keytool "
            "command that converts it",
        ),
        supported("keyStorePassword", "key_store_password", "changeit"),
        unsupported(
            "libPath",
            "no Hadoop jars are loaded: `hdfs://` speaks HDFS's RPC natively, `webhdfs://` HTTP",
        ),
        unsupported(
            "policyFilePath",
            "Java encryption policy files: the operators run in Python; TLS is Python's",
        ),
        Row(
            Kind.PARAMETER,
            "credentials",
            "credentials",
            Status.SUPPORTED,
            "a JSON string in IBM's format, as `credFile`",
            '{"user": "etl"}',
            "etl",
            {},
            lands_in="user",
        ),
        unsupported(
            "appConfigName",
            "no Streams application configurations: `password_env`, `token_env`, `keytab_env` "
            "read secrets from the environment",
        ),
        unsupported(
            "vmArg",
            "JVM options of a Java operator: ours run in Python (Spark's JVM takes `[spark] conf`)",
        ),
    ),
    about="Parameters every IBM operator takes (`AbstractHdfsOperator`, and `vmArg` of every "
    "Java operator); ours are one `[filesystem]` table per pipeline.",
    shares=False,
)

SCAN = Group(
    "HDFS2DirectoryScan",
    "operators.scan:HDFS2DirectoryScan",
    "operators.scan:ScanSettings",
    "[scan]",
    (
        supported("directory", "directory", "/landing"),
        supported("pattern", "pattern", r".*\.csv", "full match on the base name"),
        supported("initDelay", "init_delay", 2.5),
        supported("sleepTime", "sleep_time", 2.5),
        supported("strictMode", "strict_mode", True),
        port(
            IN,
            "optional control port `<rstring directory>`",
            "set_directory",
            S,
            "`set_directory(path)` in the Python API, `hdfs-region switch CONFIG DIR` for a "
            "settings file (not on Spark); covered by the next cut; the same directory "
            "lists again at once",
        ),
        port(
            OUT,
            "`<rstring filename>`, one per new or modified file",
            "next_file",
            D,
            "names go straight to the source (`next_file()`), in (mtime, name) order, each once",
        ),
        metric(
            "nScannedFiles",
            "files_emitted",
            S,
            "`metrics()`; `files_scanned` counts every listed entry",
        ),
    ),
)

SOURCE = Group(
    "HDFS2FileSource",
    "operators.source:HDFS2FileSource",
    "operators.source:SourceSettings",
    "[source]",
    (
        supported(
            "file",
            "file",
            "/landing/a.txt",
            "Python API, and `[source] file` without `[scan]` in a settings file (both engines)",
        ),
        supported("initDelay", "init_delay", 2.5),
        supported("encoding", "encoding", "latin-1"),
        supported("blockSize", "block_size", 1024),
        port(
            IN,
            "optional `<rstring filename>`",
            "files",
            D,
            "a feed object (`files=`: the scan or `FileNameList`) the source pulls names from",
        ),
        port(
            OUT,
            "`<rstring line>` or `<blob data>`, a punctuation after each file",
            "format",
            D,
            '`format = "line"` (str) or `"binary"` (bytes) picks the record, not the schema; '
            "the punctuation stays",
        ),
        metric("nOpenedFiles", "files_opened", S, "`metrics()`"),
    ),
)

SINK = Group(
    "HDFS2FileSink",
    "operators.sink:HDFS2FileSink",
    "operators.sink.settings:SinkSettings",
    "[sink]",
    (
        different(
            "file",
            "file",
            "out/f-%FILENUM.txt",
            "IBM's variables and `%PARTITION`; never overwrites a file, so rolling needs "
            "`%FILENUM` (`%TIME` alone can repeat)",
        ),
        supported(
            "fileAttributeName",
            "file_attribute_name",
            "name",
            "records are `(name, value)`; needs `directory`; a returning name rolls to a "
            "numbered file (`on_returning_name`), never drops records; IBM overwrote; up "
            "to `max_open_files` files stay open (IBM closed the file at each change of name)",
            file=None,
            directory="out",
        ),
        unsupported(
            "tempFile",
            "every file is written under a hidden name and renamed once a cut covers it "
            '(`publish = "atomic"`, the default)',
        ),
        supported("timeFormat", "time_format", "%Y%m%d", "Java pattern or strftime"),
        supported("bytesPerFile", "bytes_per_file", 1 << 20),
        supported("tuplesPerFile", "tuples_per_file", 1000),
        supported("timePerFile", "time_per_file", 60.0, "a timer: an idle sink rolls too"),
        supported("closeOnPunct", "close_on_punct", True),
        supported("encoding", "encoding", "latin-1"),
        port(
            IN,
            "`<rstring line>` or `<blob data>`",
            "format",
            D,
            '`format = "line"` (str) or `"binary"` (bytes); with `file_attribute_name`, '
            "`(name, value)` pairs",
        ),
        port(
            OUT,
            "optional `<rstring fileName, uint64 fileSize>`",
            "on_published",
            D,
            "`on_published` (`module:function` in settings and Spark options, a callback in the "
            "Python API) and `manifest` (a file per cut, exactly once): once per file when a cut "
            "covers it, not at close",
        ),
        metric(
            "nSikedFiles",
            "files_written",
            S,
            "IBM's spelling; `metrics.files_written` counts closed files",
        ),
    ),
    base={"file": "out/part-%FILENUM.txt"},
)

COPY = Group(
    "HDFS2FileCopy",
    "operators.copy:HDFS2FileCopy",
    "operators.copy:CopySettings",
    None,
    (
        supported("localFile", "local_file", "in.txt", local_file=None),
        supported("hdfsFile", "hdfs_file", "/landing/in.txt", hdfs_file=None),
        supported("deleteSourceFile", "delete_source_file", True, "only once the copy is durable"),
        supported(
            "overwriteDestinationFile",
            "overwrite_destination_file",
            True,
            "atomic replace; honoured in both directions",
        ),
        supported("direction", "direction", "copyToLocalFile"),
        supported("localFileAttrName", "local_file_attr_name", "src", local_file=None),
        supported("hdfsFileAttrName", "hdfs_file_attr_name", "dst", hdfs_file=None),
        port(
            IN,
            "`<rstring localFileAttrName, rstring hdfsFileAttrName>` or one of the two",
            "process",
            S,
            "`process(record)`: a mapping or an object with the named attributes",
        ),
        port(
            OUT,
            "optional `<rstring result, uint64 elapsedTime>`",
            "copy",
            S,
            "`copy()` / `process()` return `CopyResult(result, elapsed_time)`, IBM's text",
        ),
        metric("nCopiedFiles", "n_copied_files", S),
    ),
    base={"direction": "copyFromLocalFile", "local_file": "a.txt", "hdfs_file": "/b.txt"},
    about="Copies files between the local disk and HDFS.",
)

#: The ``@consistent`` annotation of SPL (not part of the toolkit): how a region cuts.
REGION = Group(
    "@consistent (SPL annotation)",
    None,
    "region.settings:RegionSettings",
    "[region]",
    (
        supported(
            "trigger",
            "trigger",
            "operatorDriven",
            "IBM's value `operatorDriven` too",
            expect="operator_driven",
        ),
        supported("period", "period", 2.5),
        supported("drainTimeout", "drain_timeout", 60.0),
        supported("resetTimeout", "reset_timeout", 60.0),
        supported("maxConsecutiveResetAttempts", "max_consecutive_reset_attempts", 9),
    ),
    about="Not part of the toolkit: the SPL annotation that makes a consistent region.",
    shares=False,
)

#: The toolkit's operators, in the order the docs list them.
OPERATORS: tuple[Group, ...] = (SCAN, SOURCE, SINK, COPY)
#: Every table of the docs section, in order.
GROUPS: tuple[Group, ...] = (SHARED, *OPERATORS, REGION)


def rows_of(operator: str) -> Iterator[tuple[Group, Row]]:
    """Every row of the IBM operator named ``operator`` (its own, then the shared ones), each
    with the group that says where ours lives."""
    for group in GROUPS:
        if group.ibm == operator:
            yield from ((group, row) for row in group.rows)
            if group.shares:
                yield from ((SHARED, row) for row in SHARED.rows)
            return
    known = ", ".join(g.ibm for g in GROUPS)
    raise KeyError(f"no IBM operator {operator!r} in the registry (known: {known})")


def _ibm_cell(row: Row) -> str:
    if row.kind is Kind.PARAMETER:
        return f"`{row.ibm}`"
    if row.kind is Kind.METRIC:
        return f"metric `{row.ibm}`"
    return f"{row.kind.value}: {row.ibm}"


def _ours_cell(row: Row) -> str:
    return "\N{EN DASH}" if row.ours is None else f"`{row.ours}`"


def markdown() -> str:
    """The "IBM parameters" tables of docs/ibm-migration.md (the text between :data:`BEGIN`
    and :data:`END`)."""
    lines = [f"Read from {TOOLKIT}'s Java sources. Generated by `python -m operators.app.ibm`."]
    for group in GROUPS:
        where = f" (`{group.table}`)" if group.table else ""
        lines += ["", f"### IBM {group.ibm}{where}", ""]
        if group.about:
            lines += [group.about, ""]
        lines += ["| IBM | ours | status | note |", "|---|---|---|---|"]
        for row in group.rows:
            cells = (_ibm_cell(row), _ours_cell(row), row.status.value, row.note)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def records() -> list[dict[str, Any]]:
    """Every row as a plain dict (``group``, ``kind``, ``ibm``, ``ours``, ``status``, ``note``,
    ``where``: the settings model or operator, ``table``), for tools that do not import this."""
    return [
        {
            "group": group.ibm,
            "kind": row.kind.value,
            "ibm": row.ibm,
            "ours": row.ours,
            "status": row.status.value,
            "note": row.note,
            "where": group.settings if row.kind is Kind.PARAMETER else group.operator,
            "table": group.table,
        }
        for group in GROUPS
        for row in group.rows
    ]


def replace_section(text: str, body: str) -> str:
    """``text`` with the lines between :data:`BEGIN` and :data:`END` replaced by ``body``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the text has no {BEGIN} ... {END} section")
    return text[: start + len(BEGIN)] + "\n" + body + text[end:]


def section_of(text: str) -> str:
    """The lines between :data:`BEGIN` and :data:`END` of ``text``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the text has no {BEGIN} ... {END} section")
    return text[start + len(BEGIN) : end].removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m operators.app.ibm", description="The IBM toolkit parity tables."
    )
    parser.add_argument("--markdown", action="store_true", help="print the tables (default)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--write", metavar="FILE", help="rewrite the section of this file")
    args = parser.parse_args(argv)
    if args.json:
        json.dump({"toolkit": TOOLKIT, "rows": records()}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.write is None:
        sys.stdout.write(markdown())
        return 0
    try:
        with open(args.write, encoding="utf-8") as f:
            text = f.read()
        new = replace_section(text, markdown())
    except (OSError, ValueError) as exc:
        print(f"{args.write}: {exc}", file=sys.stderr)
        return 2
    if new != text:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
