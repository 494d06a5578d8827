"""The HTTP server of a job's metrics and health checks (see :mod:`operators.app.metrics`):
``prometheus_client`` makes ``/metrics`` from the job's view at each scrape. Imported only by a
job that serves metrics, so that every other run starts without it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
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

from operators.app.metrics import CONTENT_TYPE, Histogram, JobView, lag
from region.errors import ConfigError

__all__ = ["MetricsServer"]

logger = logging.getLogger(__name__)


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
