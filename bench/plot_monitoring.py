"""The dashboard's main panels over a real run, as a PNG for docs/monitoring.md.

A Prometheus server (the ``prometheus`` binary, scraping every second) watches a local job
(``hdfs-region run --metrics-port``) while files land: one every two seconds, then a burst of
twenty that the job needs about fifteen seconds to read (a per-record pause in its transform),
then one every two seconds again. The panels are read back with ``/api/v1/query_range`` and
drawn with gnuplot (Debian: ``apt-get install gnuplot-nox``).

    python bench/plot_monitoring.py                      # docs/img/monitoring-dashboard.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINES = 1000  # records per landed file
PAUSE = 0.0005  # seconds per record in the transform: at least 0.5 s per file

TRANSFORM = f"""\
import time


def slow(record):
    time.sleep({PAUSE})
    return record
"""

SETTINGS = """\
engine = "local"
name = "dashboard-example"
[region]
period = "1s"
checkpoint_dir = "checkpoints"
[scan]
directory = "landing"
sleep_time = "200ms"
[transform]
function = "slow:slow"
[sink]
file = "out/part-%FILENUM.txt"
tuples_per_file = 10000
[metrics]
host = "127.0.0.1"
"""

#: (title, unit, [(legend, PromQL)]) of the four panels drawn.
PANELS = [
    (
        "Records per second",
        "records/s",
        [
            ("in", "rate(hdfs_region_records_in_total[5s])"),
            ("out", "rate(hdfs_region_records_out_total[5s])"),
        ],
    ),
    ("Lag: oldest landed file not read", "seconds", [("lag", "hdfs_region_lag_seconds")]),
    ("Files waiting", "files", [("waiting", "hdfs_region_files_waiting")]),
    (
        "Cut duration",
        "seconds",
        [
            (
                "p50",
                "histogram_quantile(0.5, sum by (le) "
                "(rate(hdfs_region_cut_duration_seconds_bucket[10s])))",
            ),
            (
                "p99",
                "histogram_quantile(0.99, sum by (le) "
                "(rate(hdfs_region_cut_duration_seconds_bucket[10s])))",
            ),
        ],
    ),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        answer: dict[str, object] = json.load(response)
    return answer


def start_prometheus(work: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    (work / "targets.json").write_text(json.dumps([{"targets": [target]}]))
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: hdfs-region\n    file_sd_configs:\n"
        f"      - files: ['{work / 'targets.json'}']\n        refresh_interval: 1s\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
            return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("prometheus did not start")


def land(landing: Path, n: int) -> None:
    hidden = landing / f".f{n:04d}.tmp"
    hidden.write_text("".join(f"f{n:04d}-{j:05d}\n" for j in range(LINES)))
    hidden.rename(landing / f"f{n:04d}.txt")


def run(work: Path, out_png: Path) -> None:
    (work / "landing").mkdir()
    (work / "slow.py").write_text(TRANSFORM)
    (work / "pipeline.toml").write_text(SETTINGS)
    port = free_port()
    prometheus, url = start_prometheus(work, f"127.0.0.1:{port}")
    metrics = ["--metrics-port", str(port)]
    job = subprocess.Popen(
        [sys.executable, "-m", "operators.app", "run", "pipeline.toml", "--no-progress", *metrics],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.DEVNULL,
    )
    try:
        started = time.time()
        n = 0
        # 1. One file every 2 s; 2. a burst of 20; 3. one every 2 s; 4. quiet: drained.
        for phase, count in (("steady", 10), ("burst", 20), ("steady", 5), ("quiet", 15)):
            for _ in range(count):
                if phase != "quiet":
                    land(work / "landing", n)
                    n += 1
                if phase != "burst":
                    time.sleep(2)
        ended = time.time()
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(60)
    try:
        series = []
        for _title, _unit, queries in PANELS:
            for legend, expr in queries:
                query = urllib.parse.urlencode(
                    {"query": expr, "start": started, "end": ended, "step": 1}
                )
                answer = get(f"{url}/api/v1/query_range?{query}")
                result = answer["data"]["result"]  # type: ignore[index]
                points = result[0]["values"] if result else []
                path = work / f"{len(series)}.dat"
                path.write_text(
                    "".join(f"{float(t) - started:.0f} {v}\n" for t, v in points if v != "NaN")
                )
                series.append((legend, path))
    finally:
        prometheus.terminate()
        prometheus.wait(30)
    plot(series, out_png, work)


def plot(series: list[tuple[str, Path]], out_png: Path, work: Path) -> None:
    script = [
        "set terminal png size 1200,800 font ',11'",
        f"set output '{out_png}'",
        "set multiplot layout 2,2 title 'A local job while files land: one every 2 s, "
        "20 at once at 20 s, one every 2 s until 30 s (Prometheus, 1 s scrapes)'",
        "set grid",
        "set key top right",
        "set xlabel 'seconds since start'",
    ]
    i = 0
    for title, unit, queries in PANELS:
        script += [f"set title '{title}'", f"set ylabel '{unit}'", "set yrange [0:*]"]
        plots = []
        for legend, _ in queries:
            plots.append(f"'{series[i][1]}' using 1:2 with lines linewidth 2 title '{legend}'")
            i += 1
        script.append("plot " + ", ".join(plots))
    script.append("unset multiplot")
    (work / "plot.gp").write_text("\n".join(script) + "\n")
    subprocess.run(["gnuplot", str(work / "plot.gp")], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "img" / "monitoring-dashboard.png"
    )
    args = parser.parse_args(argv)
    for tool in ("prometheus", "gnuplot"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not on PATH (Debian: prometheus, gnuplot-nox)")
    with tempfile.TemporaryDirectory(prefix="plot-monitoring-") as work:
        run(Path(work), args.out.resolve())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
