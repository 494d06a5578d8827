"""The exit codes of ``hdfs-region``, each once: the constants the commands return, and the one
table (code, commands, meaning, what to do) that every ``--help`` epilog and the documentation
(README.md, docs/getting-started.md, docs/troubleshooting.md; a test compares them) show.

``python -m operators.app.exit_codes`` prints the Markdown table."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

__all__ = [
    "DOC_MARK",
    "EXIT_CODES",
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_NOT_COPIED",
    "EXIT_OK",
    "EXIT_PENDING",
    "EXIT_PIPE",
    "EXIT_SAME_FILE",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "ExitCode",
    "epilog",
    "fill_epilog",
    "markdown_table",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
#: ``switch`` with no job running: the request is written and waits for the next start.
EXIT_PENDING = 3
#: ``copy``: SRC and DST are one file under two names: nothing copied, nothing deleted.
EXIT_SAME_FILE = 3
#: ``copy --delete-source``, no SRC, and a file at DST not proven to be this copy's.
EXIT_NOT_COPIED = 4
#: 128 + the signal's number: ``run`` stopped by a second signal without a final cut, or any
#: command interrupted (Ctrl-C).
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
#: The reader of standard output closed it (``| head``): 128 + SIGPIPE, as a shell shows.
EXIT_PIPE = 141


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: the code(s), the commands it concerns (empty: every command),
    what it means, and what to do."""

    codes: str
    commands: tuple[str, ...]
    meaning: str
    remedy: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(
        "0",
        (),
        "success: every record read was published (or the job was stopped gracefully and its "
        "final cut completed); `copy`: copied, or found already copied; `switch`: a running "
        "job applies the switch",
        "\u2013",  # an en dash: nothing to do
    ),
    ExitCode(
        "1",
        (),
        "runtime failure, with the cause on standard error: an error no retry can repair, the "
        "region failed after `max_consecutive_reset_attempts`, the checkpoint directory is "
        "held, unusable or belongs to another pipeline, an I/O error; `inspect`: no checkpoint "
        "directory or no valid cut",
        "read the cause in the line and fix it; run the same command again: it resumes at the "
        "last completed cut",
    ),
    ExitCode(
        "2",
        (),
        "configuration or usage error, one line per bad key naming the key and its value (no "
        "Java for the Spark engine, a bad option); nothing was read or written",
        "change the key or option the line names",
    ),
    ExitCode(
        "3",
        ("switch", "copy"),
        "`switch`: no job runs, the request is pending until the next start; `copy`: SRC and "
        "DST are one file under two names (nothing copied, nothing deleted)",
        "`switch`: start the job, or `switch --cancel`; `copy`: give a DST that is another file",
    ),
    ExitCode(
        "4",
        ("copy",),
        "`copy --delete-source`: no SRC, and nothing proves the file at DST is this copy's "
        "(not copied)",
        "check where the source went",
    ),
    ExitCode(
        "130, 143",
        (),
        "128 + SIGINT / SIGTERM: a second signal stopped `run` without a final cut (what was "
        "read after the last cut is not published; the summary says how much), or Ctrl-C "
        "interrupted another command",
        "run the same command again: what was not published is read again from the last cut",
    ),
    ExitCode(
        "141",
        (),
        "128 + SIGPIPE: the reader of standard output closed it (piped into `head`); the "
        "command stopped printing, quietly",
        "\u2013",  # an en dash: nothing to do
    ),
)


def _plain(text: str) -> str:
    return text.replace("`", "")


def epilog(command: str | None = None) -> str:
    """The exit codes for a ``--help`` epilog, one line each (code, a tab, meaning): those of
    ``command`` (all for ``None``). :func:`fill_epilog` wraps them."""
    rows = [
        f"{row.codes}\t{_plain(row.meaning)}"
        for row in EXIT_CODES
        if command is None or not row.commands or command in row.commands
    ]
    return "\n".join(["exit codes:", *rows])


def fill_epilog(text: str, width: int) -> str:
    """``text`` wrapped to ``width``: a ``code<TAB>meaning`` line as a hanging paragraph under
    its code, any other line as a paragraph of its own."""
    out: list[str] = []
    for line in text.splitlines():
        code, tab, meaning = line.partition("\t")
        if tab:
            out.extend(
                textwrap.wrap(
                    meaning,
                    width,
                    initial_indent=f"  {code:<10}",
                    subsequent_indent=" " * 12,
                )
            )
        else:
            out.extend(textwrap.wrap(line, width) or [""])
    return "\n".join(out)


#: The line above each copy of the table in the documentation.
DOC_MARK = (
    "<!-- exit codes: operators/app/exit_codes.py (python -m operators.app.exit_codes); "
    "a test compares -->"
)


def markdown_table() -> str:
    """The table the documentation shows under :data:`DOC_MARK` (a test compares each copy)."""
    lines = [DOC_MARK, "", "| exit | meaning | what to do |", "|---|---|---|"]
    lines.extend(f"| {row.codes} | {row.meaning} | {row.remedy} |" for row in EXIT_CODES)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
