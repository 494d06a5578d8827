"""What a terminal shows after some output: for tests and benchmarks of the progress line."""

from __future__ import annotations

import re

__all__ = ["CSI", "screen"]

#: A control sequence: private marker, number, command.
CSI = re.compile(r"\x1b\[(\??)(\d*)([A-Za-z])")


def screen(output: str, width: int) -> list[str]:
    """The rows a terminal of ``width`` columns shows after ``output``: carriage return, line
    feed (as a terminal's output processing turns it into CR LF), erase line, cursor up, and
    automatic wrapping of a row that is full. Any other escape sequence is a ``ValueError``."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(output):
        match = CSI.match(output, i)
        if match:
            private, number, command = match.groups()
            i = match.end()
            if private:  # cursor shown or hidden
                continue
            if command == "K" and number == "2":
                rows[row] = []
            elif command == "A":
                row = max(0, row - int(number or 1))
            else:
                raise ValueError(f"unexpected escape sequence {match.group()!r}")
            continue
        char = output[i]
        i += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
        else:
            if col == width:  # the row is full: the terminal wraps
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            cells = rows[row]
            cells.extend(" " * (col + 1 - len(cells)))
            cells[col] = char
            col += 1
        while len(rows) <= row:
            rows.append([])
    text = ["".join(cells).rstrip() for cells in rows]
    while text and not text[-1]:
        text.pop()
    return text
