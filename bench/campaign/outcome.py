"""One row of the campaign table, and the output compared with the input record by record."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Outcome", "Tally", "tally"]


@dataclass
class Outcome:
    """One row of the campaign table."""

    fault: str
    engine: str
    delivery: str
    expected: str  # what must happen: "recovery" or "clear error, then recovery"
    outcome: str  # what happened, in a few words
    lost: int = 0
    duplicated: int = 0
    corrupt: int = 0
    ok: bool = False
    message: str = ""  # the error message the user saw, when there was one
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Tally:
    """Output compared with input, record by record."""

    expected: int
    lost: int
    duplicated: int
    corrupt: int
    examples: dict[str, list[str]]

    def exactly_once(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.corrupt == 0

    def at_least_once(self) -> bool:
        return self.lost == 0 and self.corrupt == 0


def tally(
    expected: set[str],
    got: Counter[str],
    *,
    allowed_missing: frozenset[str] | set[str] = frozenset(),
) -> Tally:
    lost = [r for r in expected if r not in got and r not in allowed_missing]
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    corrupt = [r for r in got if r not in expected]
    return Tally(
        expected=len(expected),
        lost=len(lost),
        duplicated=duplicated,
        corrupt=sum(got[r] for r in corrupt),
        examples={
            "lost": sorted(lost)[:5],
            "duplicated": sorted(r for r, n in got.items() if n > 1)[:5],
            "corrupt": sorted(corrupt)[:5],
        },
    )
