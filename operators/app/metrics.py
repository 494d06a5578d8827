"""Metrics a monitoring system scrapes, and health checks an orchestrator probes.

One small HTTP server per job (``[metrics] port``, ``--metrics-port``), on the driver for Spark:

- ``/metrics``: Prometheus' text format, made by ``prometheus_client`` from a :class:`JobView`
  taken *at scrape time* (:mod:`operators.app.metrics_server`, imported only by a job that
  serves metrics). The engines keep their counters as plain integers on their own
  objects (as they always did, for progress); nothing here runs per record or per batch, so a
  job pays for metrics only when it is scraped.
- ``/healthz``: 200 while the process lives and its region is not stuck (:func:`health`),
  503 with the reason otherwise.
- ``/readyz``: 200 once the job recovered its checkpoint and processes, 503 before and after.

A port already taken is a configuration error at start (exit 2), never a job that runs unseen.

Output, counted the same way by both engines (docs/monitoring.md, "Written, published,
waiting"):

- *written*: records (bytes) in output files, published or not: ``records_out_total``;
- *published*: of those, in files a completed cut (Spark: a batch's commit, or the sink's
  idle close) published, which plain readers see: ``records_published_total``;
- *waiting*: written and not published yet, a gauge: ``records_unpublished``; the oldest of them
  counts in ``lag_seconds`` beside the oldest landed file not read to its end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from operators.app.progress import Progress
from region.controller import CUT_SECONDS_BUCKETS
from region.settings import RegionSettings, Trigger

__all__ = ["CONTENT_TYPE", "Histogram", "JobView", "health", "lag", "period_of"]

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative counts per upper bound (as Prometheus counts them) and the sum."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    @classmethod
    def empty(cls, bounds: tuple[float, ...] = CUT_SECONDS_BUCKETS) -> Histogram:
        return cls(bounds, (0,) * len(bounds), 0.0)

    def observe(self, seconds: float) -> Histogram:
        """A new histogram with ``seconds`` counted (a value: the old one is unchanged)."""
        counts = tuple(c + (seconds <= b) for b, c in zip(self.bounds, self.counts, strict=True))
        return Histogram(self.bounds, counts, self.total + seconds)

    @property
    def count(self) -> int:
        return self.counts[-1] if self.counts else 0


@dataclass(frozen=True, slots=True)
class JobView:
    """What a scrape reports of a job: counters that only grow, and the state of now."""

    progress: Progress
    #: ``(mtime_ns, bytes)`` of each landed file not read to its end yet (the file being read
    #: counts with its unread bytes), as of the scan's latest listing; ``None`` where this
    #: process cannot know (Spark streaming execution plans in a Python worker of the JVM):
    #: then no lag is reported at all, rather than a lag of 0 that would hide a backlog.
    waiting: Sequence[tuple[int, int]] | None = None
    files_listed: int | None = None
    #: Records written into output files, where the engine counts them otherwise than its
    #: progress line; ``None``: the progress line's count.
    records_out: int | None = None
    #: Of the records (bytes) written, those in published files; the records waiting in files
    #: not published yet, and when the oldest of those files was opened (``time.time()``;
    #: ``None``: none waits). ``None`` counts: not known here (no metric).
    records_published: int | None = None
    bytes_published: int | None = None
    records_unpublished: int | None = None
    unpublished_since: float | None = None
    #: ``None``: not known here (no metric rather than a 0 that is not true).
    files_archived: int | None = None
    files_deleted: int | None = None
    bytes_out: int | None = None
    consecutive_resets: int = 0
    #: The region's period (periodic trigger), for "no cut for N periods" alerts.
    period_seconds: float | None = None
    #: Cuts (Spark: micro-batches) by duration.
    cut_seconds: Histogram = field(default_factory=Histogram.empty)
    last_cut_at: float | None = None
    checkpoint_bytes: int | None = None
    #: When this process last renewed the checkpoint directory's lock (``time.time()``).
    lock_renewed_at: float | None = None
    #: Spark: each batch's job and commit, by duration.
    job_seconds: Histogram | None = None
    commit_seconds: Histogram | None = None
    #: Recovered and processing (``/readyz``).
    ready: bool = False
    #: Why the job is not healthy (``/healthz``), or ``None``.
    stuck: str | None = None


def lag(
    waiting: Sequence[tuple[int, int]], now: float, unpublished_since: float | None = None
) -> float:
    """Age in seconds of the oldest data not yet published: the oldest waiting file, by its
    mtime (a file with an mtime in the future counts as landed now), or the oldest file of
    records read but not published, by when it was opened; 0 when nothing waits."""
    ages = [0.0]
    if waiting:
        ages.append(now - min(mtime for mtime, _ in waiting) / _NS)
    if unpublished_since is not None:
        ages.append(now - unpublished_since)
    return max(ages)


def period_of(region: RegionSettings) -> float | None:
    """The period between cuts, for a periodic region (``None``: cuts follow the operators)."""
    return region.period if region.trigger == Trigger.PERIODIC else None


def health(
    status: str, status_since: float, last_cut_at: float | None, now: float, bound: float
) -> str | None:
    """Why a region is not healthy, or ``None``. Unhealthy: FAILED; or inside one cut or reset
    (draining, checkpointing, resetting) for longer than ``bound`` seconds, which only a
    blocked operator explains (each step has its own timeout below the bound)."""
    if status == "failed":
        return "the region failed"
    if status in ("draining", "checkpointing", "resetting") and now - status_since > bound:
        since = "" if last_cut_at is None else f"; last cut {now - last_cut_at:.0f} s ago"
        return f"{status} for {now - status_since:.0f} s (bound {bound:g} s{since})"
    return None
