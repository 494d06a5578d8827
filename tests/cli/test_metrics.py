"""Metrics of a running job, scraped by a real Prometheus server and read back through its
query API; the health endpoints; a metrics port already taken."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import urllib.error
import urllib.request

import pytest

from operators.app.metrics import JobView, health
from operators.app.metrics_server import MetricsServer
from operators.app.progress import Progress
from tests.cli.conftest import ROOT, PipelineDir, cli, start_cli, wait_for
from tests.conftest import Prometheus, free_port

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000

LOCAL = """\
    engine = "local"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    sleep_time = "50ms"
    late_window = 0
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 3
    close_idle_after = "1s"
    [metrics]
    host = "127.0.0.1"
"""


def dashboard_queries() -> list[str]:
    dashboard = json.loads((ROOT / "conf" / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_docs_list_every_metric_the_rules_and_the_dashboard_use_and_show_the_rules() -> None:
    doc = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(hdfs_region_\w+)`", doc, re.MULTILINE))
    rules = (ROOT / "conf" / "prometheus-alerts.yml").read_text(encoding="utf-8")
    used = set(re.findall(r"hdfs_region_\w+", rules + "\n".join(dashboard_queries())))
    assert {re.sub(r"_(bucket|count|sum)$", "", name) for name in used} <= listed
    assert rules in doc  # shown as shipped


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_prometheus_reads_records_out_lag_and_a_passed_over_file_of_a_local_job(
    pdir: PipelineDir, prometheus: Prometheus
) -> None:
    # 1. A first run, without metrics, reads b.txt.
    pdir.add_file("b.txt", ["b1", "b2"])
    config = pdir.write_config(LOCAL)
    first = cli("run", str(config), "--available-now", "--no-progress")
    assert first.returncode == 0, first.stderr
    # 2. While the job is down: a.txt lands with an older mtime (passed over under
    #    late_window = 0) and c.txt lands on time.
    late = pdir.landing / "a.txt"
    late.write_text("a1\n", encoding="utf-8")
    os.utime(late, ns=(T0 - 30 * S, T0 - 30 * S))
    pdir.add_file("c.txt", [f"c{i}" for i in range(9)])
    # 3. The job runs on with metrics; Prometheus scrapes it every second.
    port = free_port()
    job = start_cli("run", str(config), "--metrics-port", str(port), "--log-format", "json")
    prometheus.watch(f"127.0.0.1:{port}")
    target = f'{{instance="127.0.0.1:{port}"}}'
    try:
        wait_for(
            lambda: pdir.output_lines()[2:] == [f"c{i}" for i in range(9)],
            what=f"c0..c8 published ({pdir.output_lines()})",
            alive=job,
        )

        def scraped(name: str) -> list[float]:
            return prometheus.query(f"hdfs_region_{name}{target}")

        def settled() -> bool:
            return (
                scraped("records_out_total") == [9.0]
                and scraped("files_passed_over_total") == [1.0]
                and scraped("lag_seconds") == [0.0]
                and scraped("files_waiting") == [0.0]
                and scraped("bytes_waiting") == [0.0]
            )

        wait_for(settled, what="Prometheus to scrape the drained job", alive=job)
        assert scraped("records_in_total") == [9.0]
        assert scraped("files_read_total") == [1.0]
        assert scraped("files_published_total") == [3.0]  # 3 records each
        assert scraped("cut_duration_seconds_count")[0] >= 1
        assert scraped("last_cut_timestamp_seconds")[0] > 0
        assert scraped("ready") == [1.0] and scraped("healthy") == [1.0]
        assert status(f"http://127.0.0.1:{port}/readyz") == 200
        assert status(f"http://127.0.0.1:{port}/healthz") == 200
        # The shipped alert rule fires on the passed-over file; every dashboard query runs.
        firing = f'ALERTS{{alertname="HdfsRegionFilePassedOver",alertstate="firing",{target[1:]}'
        wait_for(lambda: prometheus.query(firing) == [1.0], what="the alert", alive=job)
        for expr in dashboard_queries():
            prometheus.query(expr.replace("$pipeline", ".*"))
        # 4. A file landing now waits until it is read and its record published (its file
        #    idle for close_idle_after): the lag is its age, then 0 again.
        pdir.add_file("d.txt", ["d1"])
        wait_for(lambda: scraped("records_out_total") == [10.0], alive=job)
        wait_for(lambda: scraped("lag_seconds") == [0.0], alive=job)
    finally:
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=60)
    assert job.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in err.splitlines()]
    assert any(line["message"].startswith("Metrics on http://127.0.0.1:") for line in lines)
    assert {line["pipeline"] for line in lines} == {lines[0]["pipeline"]} != {None}
    assert any(isinstance(line["cut"], int) for line in lines)


SPARK = """\
    engine = "spark"
    [region]
    period = "200ms"
    [scan]
    directory = "landing"
    late_window = 0
    [transform]
    sql = "SELECT upper(value) AS value FROM input"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 2
    [metrics]
    host = "127.0.0.1"
"""


@pytest.mark.slow
def test_prometheus_reads_records_out_lag_batch_times_and_a_passed_over_file_of_a_spark_job(
    pdir: PipelineDir, prometheus: Prometheus
) -> None:
    pdir.add_file("b.txt", ["b1", "b2"])
    config = pdir.write_config(SPARK)
    port = free_port()
    job = start_cli("run", str(config), "--no-progress", "--metrics-port", str(port))
    prometheus.watch(f"127.0.0.1:{port}")
    target = f'{{instance="127.0.0.1:{port}"}}'

    def scraped(name: str) -> list[float]:
        return prometheus.query(f"hdfs_region_{name}{target}")

    try:
        wait_for(lambda: scraped("records_out_total") == [2.0], 180, "batch of b.txt", job)
        # An older mtime than b.txt, read already: passed over (late_window = 0).
        hidden = pdir.landing / ".a.txt.tmp"
        hidden.write_text("a1\n", encoding="utf-8")
        os.utime(hidden, ns=(T0 - 30 * S, T0 - 30 * S))
        hidden.rename(pdir.landing / "a.txt")
        pdir.add_file("c.txt", ["c1", "c2"])

        def settled() -> bool:
            return (
                scraped("records_out_total") == [4.0]
                and scraped("files_passed_over_total") == [1.0]
                and scraped("lag_seconds") == [0.0]
                and scraped("files_waiting") == [0.0]
            )

        wait_for(settled, 120, "Prometheus to scrape the drained job", job)
        published = [p for p in pdir.out.iterdir() if p.is_file() and p.name.startswith("part")]
        assert scraped("files_published_total") == [float(len(published))] == [2.0]
        assert scraped("bytes_out_total") == [float(sum(p.stat().st_size for p in published))]
        batches = scraped("cuts_total")[0]
        assert scraped("cut_duration_seconds_count") == [batches]
        assert scraped("batch_job_seconds_count") == [batches]
        assert scraped("batch_commit_seconds_count") == [batches]
        assert scraped("ready") == [1.0] and scraped("healthy") == [1.0]
    finally:
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert sorted(pdir.output_lines()) == ["B1", "B2", "C1", "C2"]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_metrics_port_already_taken_stops_the_job_at_start_with_exit_2(
    pdir: PipelineDir, engine: str
) -> None:
    pdir.add_file("b.txt", ["b1"])
    config = pdir.write_config(LOCAL.replace('engine = "local"', f'engine = "{engine}"'))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = cli("run", str(config), "--no-progress", "--metrics-port", str(port))
    assert run.returncode == 2, run.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in run.stderr
    assert "--metrics-port" in run.stderr
    assert not (pdir.root / "checkpoints").exists()  # nothing started
    assert not pdir.out.exists()


def test_healthz_fails_only_for_a_failed_region_or_one_stuck_in_a_cut_or_reset_past_the_bound() -> (
    None
):
    bound = 600.0
    assert health("processing", 0.0, None, 10_000.0, bound) is None  # idle or lagging: alive
    assert health("draining", 9_500.0, None, 10_000.0, bound) is None  # a slow cut, in bound
    stuck = health("draining", 9_000.0, 8_990.0, 10_000.0, bound)
    assert stuck == "draining for 1000 s (bound 600 s; last cut 1010 s ago)"
    assert health("resetting", 0.0, None, 10_000.0, bound) == "resetting for 10000 s (bound 600 s)"
    assert health("failed", 10_000.0, None, 10_000.0, bound) == "the region failed"
    # Served: 503 with the reason on /healthz, /readyz by readiness, 200 otherwise.
    view = JobView(progress=Progress(status="draining"), stuck=stuck, ready=True)
    with MetricsServer(lambda: view, port=0, host="127.0.0.1", labels={"pipeline": "p"}) as server:
        url = "http://{}:{}".format(*server.address)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/healthz", timeout=10)
        assert refused.value.code == 503 and refused.value.read().decode() == f"{stuck}\n"
        assert status(f"{url}/readyz") == 200
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert 'hdfs_region_healthy{pipeline="p"} 0.0' in text
        assert "hdfs_region_lag_seconds" not in text  # not known: left out, not 0


WAITING = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 3
    close_idle_after = "{idle}"
    [metrics]
    host = "127.0.0.1"
    [spark]
    master = "local[1]"
"""


def _scrape(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.parametrize(
    "engine", ["local", pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]
)
def test_written_published_and_waiting_mean_the_same_on_both_engines(
    pdir: PipelineDir, engine: str
) -> None:
    """10 records land in files of 3, then nothing: 10 written, 9 published and 1 waiting,
    which the lag counts (it read 0, and Spark's records_out stayed 0 while the records were
    written); once the file is idle for close_idle_after, all 10 published, lag 0."""
    pdir.add_file("a.txt", [f"a{i}" for i in range(10)])
    config = pdir.write_config(WAITING.format(engine=engine, idle="6s"))
    port = free_port()
    job = start_cli("run", str(config), "--no-progress", "--metrics-port", str(port))
    names = ("records_out_total", "records_published_total", "records_unpublished")
    try:
        wait_for(lambda: len(pdir.output_lines()) == 9, 180, "9 records published", job)
        wait_for(lambda: port_open(port), 60, "the metrics port", job)
        wait_for(
            lambda: [_scrape(port).get(f"hdfs_region_{n}") for n in names] == [10, 9, 1],
            60,
            "10 written, 9 published, 1 waiting",
            job,
        )
        metrics = _scrape(port)
        assert metrics["hdfs_region_lag_seconds"] > 0
        assert metrics["hdfs_region_bytes_out_total"] > metrics["hdfs_region_bytes_published_total"]
        wait_for(lambda: len(pdir.output_lines()) == 10, 60, "the idle file published", job)
        wait_for(
            lambda: [_scrape(port).get(f"hdfs_region_{n}") for n in names] == [10, 10, 0],
            30,
            f"all 10 published ({[_scrape(port).get(f'hdfs_region_{n}') for n in names]})",
            job,
        )
        metrics = _scrape(port)
        assert metrics["hdfs_region_lag_seconds"] == 0
        assert metrics["hdfs_region_files_published_total"] == 4
        size = sum(p.stat().st_size for p in pdir.out.iterdir() if p.name.startswith("part"))
        assert metrics["hdfs_region_bytes_published_total"] == size
    finally:
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
