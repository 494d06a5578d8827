"""Metrics a monitoring system scrapes, and health checks an orchestrator probes.

One small HTTP server per job (``[metrics] port``, ``--metrics-port``), on the driver for Spark:

- ``/metrics``: Prometheus' text format, made by ``prometheus_client`` from a :class:`JobView`
  taken *at scrape time*. The engines keep their counters as plain integers on their own
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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from operators.app.progress import Progress
from region.controller import CUT_SECONDS_BUCKETS
from region.errors import ConfigError
from region.settings import RegionSettings, Trigger

__all__ = ["CONTENT_TYPE", "Histogram", "JobView", "MetricsServer", "health", "period_of"]

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


class _JobCollector(Collector):
    """Turns the view of the moment into metric families, each scrape."""

    def __init__(self, view: Callable[[], JobView], labels: dict[str, str]) -> None:
        self._view = view
        self._names = list(labels)
        self._values = list(labels.values())

    def _counter(self, name: str, doc: str, value: float | None) -> Iterator[Metric]:
        if value is not None:
            family = CounterMetricFamily(name, doc, labels=self._names)
            family.add_metric(self._values, value)
            yield family

    def _gauge(self, name: str, doc: str, value: float | None) -> Iterator[Metric]:
        if value is not None:
            family = GaugeMetricFamily(name, doc, labels=self._names)
            family.add_metric(self._values, value)
            yield family

    def _histogram(self, name: str, doc: str, hist: Histogram | None) -> Iterator[Metric]:
        if hist is not None:
            family = HistogramMetricFamily(name, doc, labels=self._names)
            buckets = [(f"{b:g}", c) for b, c in zip(hist.bounds, hist.counts, strict=True)]
            buckets.append(("+Inf", hist.count))
            family.add_metric(self._values, buckets, hist.total)
            yield family

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        p = view.progress
        now = time.time()
        c, g = self._counter, self._gauge
        p_ = "hdfs_region_"
        yield from c(p_ + "records_in", "Records read from input files.", p.records_in)
        yield from c(
            p_ + "records_out",
            "Records written into output files, published or not.",
            view.records_out if view.records_out is not None else p.records_out,
        )
        yield from c(
            p_ + "records_published",
            "Records in output files published (what plain readers see).",
            view.records_published,
        )
        yield from g(
            p_ + "records_unpublished",
            "Records written into output files not published yet.",
            view.records_unpublished,
        )
        yield from c(p_ + "bytes_in", "Input bytes read (line ends included).", p.bytes_in)
        yield from c(p_ + "bytes_out", "Bytes written into output files.", view.bytes_out)
        yield from c(
            p_ + "bytes_published", "Bytes of output files published.", view.bytes_published
        )
        yield from c(
            p_ + "files_listed",
            "Entries returned by directory listings (a file counts in each listing that sees it).",
            view.files_listed,
        )
        yield from c(
            p_ + "files_read", "Landed files the scan handed to the source to read.", p.files_in
        )
        yield from c(p_ + "files_published", "Output files published.", p.files_out)
        yield from c(
            p_ + "files_passed_over",
            "Landed files that could only be passed over (each logged by name).",
            p.files_passed_over,
        )
        yield from c(
            p_ + "files_changed_after_read",
            "Files that changed after they were read and were not read again (on_modified = "
            "'warn'; the default reads what the content says is new).",
            p.files_modified,
        )
        yield from c(p_ + "files_archived", "Input files archived.", view.files_archived)
        yield from c(p_ + "files_deleted", "Input files deleted after reading.", view.files_deleted)
        yield from c(p_ + "cuts", "Consistent cuts completed (Spark: batches).", p.cuts)
        yield from self._histogram(
            p_ + "cut_duration_seconds", "Duration of each completed cut.", view.cut_seconds
        )
        yield from c(p_ + "resets", "Region resets (Spark: query restarts).", p.resets)
        yield from g(
            p_ + "consecutive_resets",
            "Resets since the last completed cut (the region fails past its maximum).",
            view.consecutive_resets,
        )
        yield from g(
            p_ + "last_cut_timestamp_seconds",
            "When the newest cut completed (Unix time).",
            view.last_cut_at,
        )
        yield from g(
            p_ + "period_seconds",
            "The region's cut period (periodic trigger).",
            view.period_seconds,
        )
        if view.waiting is not None:
            yield from g(
                p_ + "lag_seconds",
                "Age of the oldest data not published: a landed file not read to its end (by "
                "mtime), or records read into a file not published yet; 0 when none.",
                lag(view.waiting, now, view.unpublished_since),
            )
            yield from g(p_ + "files_waiting", "Landed files not yet read.", len(view.waiting))
            yield from g(
                p_ + "bytes_waiting",
                "Bytes of landed files not yet read.",
                sum(size for _, size in view.waiting),
            )
        yield from g(
            p_ + "checkpoint_bytes", "Size of the newest checkpoint.", view.checkpoint_bytes
        )
        yield from g(
            p_ + "lock_heartbeat_age_seconds",
            "Seconds since this process last renewed its checkpoint directory lock.",
            None if view.lock_renewed_at is None else max(0.0, now - view.lock_renewed_at),
        )
        yield from self._histogram(
            p_ + "batch_job_seconds", "Spark: each batch's job.", view.job_seconds
        )
        yield from self._histogram(
            p_ + "batch_commit_seconds", "Spark: each batch's commit.", view.commit_seconds
        )
        yield from g(p_ + "ready", "1 once recovered and processing.", float(view.ready))
        yield from g(p_ + "healthy", "1 while the region is not stuck.", float(not view.stuck))
        status = GaugeMetricFamily(
            p_ + "status",
            "The region's status (1 for the current one).",
            labels=[*self._names, "status"],
        )
        status.add_metric([*self._values, p.status], 1.0)
        yield status


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on a daemon thread.

    ``view`` is called on the server's thread at each request: it must only read (plain
    attributes, snapshots taken under the engines' own locks)."""

    def __init__(
        self, view: Callable[[], JobView], *, port: int, host: str, labels: dict[str, str]
    ) -> None:
        self._view = view
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_JobCollector(view, labels))
        handler = _handler(self)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            msg = (
                f"[metrics] port: cannot serve metrics on {host}:{port} ({exc.strerror}): "
                "choose another port (--metrics-port), or 0 for any free one"
            )
            raise ConfigError(msg) from None
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        # A short poll: stop() waits for the loop to notice, and a job's exit should not.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="metrics-http", daemon=True
        )
        self._thread.start()
        host, port = self.address
        logger.info("Metrics on http://%s:%d/metrics (health: /healthz, /readyz)", host, port)
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
            self._thread = None
        self._server.server_close()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a request path."""
        route = path.split("?", 1)[0]
        if route == "/metrics":
            return 200, CONTENT_TYPE, generate_latest(self.registry)
        if route in ("/healthz", "/readyz"):
            view = self._view()
            if route == "/healthz":
                problem = view.stuck
            else:
                problem = None if view.ready else f"not ready: {view.progress.status}"
            if problem is None:
                return 200, "text/plain", b"ok\n"
            return 503, "text/plain", f"{problem}\n".encode()
        return 404, "text/plain", b"try /metrics, /healthz or /readyz\n"

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                status, content_type, body = server.respond(self.path)
            except Exception:  # a scrape must never take the job down
                logger.warning("metrics: %s failed", self.path, exc_info=True)
                status, content_type, body = 500, "text/plain", b"error\n"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("metrics: %s", format % args)

    return Handler
