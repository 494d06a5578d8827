"""The sink's counters, apart from the sink so that what counts (records, the operator) needs no
import of the operator."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SinkMetrics"]


@dataclass(slots=True)
class SinkMetrics:
    """Counters of this sink object (not state: they only grow, also across resets)."""

    files_opened: int = 0
    files_written: int = 0  # closed (complete) files
    files_published: int = 0
    tuples_written: int = 0
    bytes_written: int = 0
    #: Of those, in files published by this sink object.
    tuples_published: int = 0
    bytes_published: int = 0
    #: Records that could not be written (skipped or rejected, see ``on_bad_record``).
    bad_records: int = 0
    records_rejected: int = 0  # of ``bad_records``, those written to the rejects file
    #: Of ``bad_records``, records handed to this sink that it could not write (the others are
    #: rows the source could not read, which were never records).
    records_not_written: int = 0
    published: list[tuple[str, int]] = field(default_factory=list)  # the last 100
