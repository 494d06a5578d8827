"""Each benchmark script runs end to end at a tiny size and writes the results it promises.

The scripts check their own outputs (the pipeline's published files against the input, the
scan's order, the output after kills) and fail when they differ; these tests run them as a user
would and check the JSON. No timing is asserted: figures depend on the machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from operators.fs import open_path
from operators.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

#: script -> arguments of a tiny run
TINY: dict[str, list[str]] = {
    "pipeline": [
        "--mb",
        "2",
        "--files",
        "3",
        "--repeat",
        "1",
        "--metrics-repeat",
        "1",
        "--profile",
    ],
    "scan": ["--files", "600", "--tie", "50", "--repeat", "1", "--late-windows", "0.01"],
    "cut_latency": ["--cuts", "2", "--period", "0.1", "--rate-mb", "0.5", "--file-kb", "16"],
    "recovery": ["--trials", "1", "--period", "200ms", "--lines", "1000"],
    "listing": [
        *("--local-files", "300", "--no-hdfs", "--repeat", "1", "--new", "5"),
        *("--archive-files", "300", "--rounds", "3"),
    ],
    "curated": ["--mb", "1", "--repeat", "1", "--no-spark"],
    "memory": ["--gb", "0.002,0.004", "--file-mb", "1"],
}
SCRIPTS = {
    "pipeline": "bench_pipeline.py",
    "scan": "bench_scan.py",
    "cut_latency": "bench_cut_latency.py",
    "recovery": "bench_recovery.py",
    "listing": "bench_listing.py",
    "curated": "bench_curated.py",
    "memory": "bench_memory.py",
}


def failed(done: subprocess.CompletedProcess[str]) -> str:
    """Why a benchmark failed: the lines naming an exception (a Java one's first line comes
    long before the end of its stack), then the ends of both streams."""
    said = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if ("Exception" in line or "Error" in line) and not line.lstrip().startswith("at ")
    ]
    return "\n".join([*said[:10], done.stdout[-2000:], done.stderr[-2000:]])


def run_script(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every benchmark run once at a tiny size; their JSON files in one directory."""
    out = tmp_path_factory.mktemp("results")
    work = tmp_path_factory.mktemp("work")
    for name, script in SCRIPTS.items():
        done = run_script(
            script, *TINY[name], "--json", str(out / f"{name}.json"), "--work", str(work)
        )
        assert done.returncode == 0, (
            f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        assert "results:" in done.stdout  # the table was printed, then the file written
    assert not any(work.iterdir()), "a benchmark left its scratch files behind"
    return out


def load(results: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((results / f"{name}.json").read_text())
    assert data["benchmark"] == name
    assert data["machine"]["cpus"] >= 1 and data["command"]
    return data


def test_pipeline_copies_every_byte_and_reports_both_rates(results: Path) -> None:
    data = load(results, "pipeline")
    assert data["output_correct"] is True
    assert data["input_files"] == 3 and data["input_lines"] > 0
    for side in ("pipeline", "plain_loop"):
        assert data[side]["mb_per_s"] > 0 and len(data[side]["seconds"]) == 1
    assert data["ratio"] == pytest.approx(
        data["pipeline"]["mb_per_s"] / data["plain_loop"]["mb_per_s"], rel=0.05
    )
    assert data["pipeline"]["cuts"][0] >= 1  # at least the final cut that published the output
    assert isinstance(data["target_met"], bool)
    # A cProfile listing of one run ("N function calls (M primitive calls) in S seconds" when
    # some calls recursed).
    assert re.search(r"\d+ function calls( \(\d+ primitive calls\))? in ", data["profile_top"])
    # The job with metrics off and on (output checked by the script), side by side.
    metrics = data["metrics"]
    for side in ("off", "on"):
        assert metrics[side]["mb_per_s"] > 0 and len(metrics[side]["seconds"]) == 1
    assert isinstance(metrics["target_met"], bool) and metrics["ratio"] > 0


def test_scan_emits_every_file_in_order_with_a_bounded_checkpoint(results: Path) -> None:
    data = load(results, "scan")
    assert data["output_correct"] is True
    assert data["files"] == 600 and data["distinct_mtimes"] == 12
    strict = data["checkpoint_sizes"]["0"]
    assert [s["files_emitted"] for s in strict] == [6, 60, 600]
    # Without a window every name is in the census, a table of fixed size.
    assert all(s["late_names"] == 0 for s in strict)
    assert [s["census_names"] for s in strict] == [6, 60, 600]
    assert data["target_met"]["checkpoint"] is True
    # With a late window the state holds the names inside the window, the census the others.
    windowed = data["checkpoint_sizes"]["0.01"]
    assert all(0 < s["late_names"] <= s["files_emitted"] for s in windowed)
    assert all(s["late_names"] + s["census_names"] == s["files_emitted"] for s in windowed)
    assert data["ratio"] > 0 and data["best_ratio"] > 0


def test_listing_times_one_scan_against_the_plain_listing(results: Path) -> None:
    data = load(results, "listing")
    assert data["output_correct"] is True
    (row,) = data["local"]["sizes"]
    assert row["files"] == 300 and row["baseline"] == "os.scandir + stat"
    kinds = {"os.scandir + stat", "first scan", "steady scan", "Spark plan"}
    assert set(row["median_seconds"]) == kinds == set(row["peak_bytes"])
    assert all(len(v) == 1 for v in row["seconds"].values())
    assert set(row["ratio"]) == kinds - {"os.scandir + stat"}
    # One steady scan found exactly the 5 files landed since the last (the script checks it).
    assert row["listed_at_end"] == 300 + 5 * 2
    assert all(v > 0 for v in row["peak_bytes"].values())
    archive = data["local"]["archive"]
    assert archive["files_processed"] == 300 and archive["rounds"] == 3
    assert len(archive["kept_bytes"]) == len(archive["peak_bytes"]) == 3
    assert "moved out" in archive["simulated"]
    assert isinstance(data["target_met"], bool)
    assert len(data["load_average"]["before"]) == 3


def test_cut_latency_measures_both_backends_and_checks_the_output(results: Path) -> None:
    data = load(results, "cut_latency")
    assert set(data["backends"]) == {"local", "webhdfs"}
    for backend in data["backends"].values():
        assert backend["output_correct"] is True
        assert backend["cuts"] >= 2 and len(backend["samples_ms"]) == backend["cuts"]
        assert 0 < backend["p50_ms"] <= backend["p99_ms"] <= backend["max_ms"]
        assert backend["records"] > 0
    assert data["fsync_floor"]["p50_ms"] > 0
    assert isinstance(data["target_met"], bool)


def test_recovery_reaches_every_milestone_and_loses_nothing(results: Path) -> None:
    data = load(results, "recovery")
    assert data["output_correct"] is True
    for side in ("after_sigkill_s", "fresh_start_s"):
        times = data[side]
        assert 0 < times["recovered"] <= times["first_cut"]
        assert times["first_file"] > 0
    assert len(data["samples"]["after_sigkill"]) == 1


def test_curated_checks_every_row_of_both_runs_and_reports_memory(results: Path) -> None:
    data = load(results, "curated")
    assert data["rows"] > 0 and data["repeat"] == 1
    for side in ("ours", "plain"):
        figures = data["figures"][side]
        assert len(figures["seconds"]) == 1 and figures["peak_rss_mb"][0] > 10
        # The process tree's peak holds at least the process's own.
        assert figures["peak_tree_rss_mb"][0] >= figures["peak_rss_mb"][0]
    assert data["ratio_to_plain_pyarrow"] > 0


def test_memory_checks_every_line_at_each_size_and_reports_the_peaks(results: Path) -> None:
    data = load(results, "memory")
    assert data["sizes_gb"] == [0.002, 0.004] and data["compression"] == "gzip"
    # The larger input extends the smaller one: twice the files, twice the lines.
    assert data["runs"]["0.004"]["lines"] > data["runs"]["0.002"]["lines"] > 0
    for run in data["runs"].values():
        for side in ("ours", "plain"):
            assert run[side]["peak_tree_rss_mb"] >= run[side]["peak_rss_mb"] > 5


@pytest.mark.integration  # three processes on the cluster: kept out of the README's command
def test_curated_on_hdfs_reads_and_writes_through_the_cluster_and_checks_every_row(
    hdfs_sandbox: Sandbox, tmp_path: Path
) -> None:
    """bench_curated.py --hdfs-uri on the session's cluster: the input, both runs' outputs and
    the checkpoints on hdfs://, every row checked there."""
    info = hdfs_sandbox.info
    work = tmp_path / "work"
    done = run_script(
        "bench_curated.py",
        *("--hdfs-uri", info.hdfs + "/bench-curated", "--conf-dir", info.conf_dir),
        *("--mb", "1", "--repeat", "1", "--no-spark"),
        *("--json", str(tmp_path / "curated.json"), "--work", str(work)),
        timeout=300,
    )
    assert done.returncode == 0, failed(done)
    assert "on hdfs://" in done.stdout
    assert not any(work.iterdir()), "the benchmark left its scratch files behind"
    data = json.loads((tmp_path / "curated.json").read_text())
    assert data["on"] == "hdfs" and data["rows"] > 0
    for side in ("ours", "plain"):
        assert len(data["figures"][side]["seconds"]) == 1
    # Nothing is left on the cluster: each run's directory is removed.
    fs, root = open_path(info.hdfs + "/bench-curated")
    assert [s.name for s in fs.list_dir(root)] == []


def test_run_all_tabulates_the_results(results: Path) -> None:
    done = run_script("run_all.py", "--table-only", "--results", str(results))
    assert done.returncode == 0, done.stderr
    summary = json.loads((results / "summary.json").read_text())
    names = [row["benchmark"] for row in summary["table"]]
    assert any(n.startswith("1 in-process pipeline") for n in names)
    assert any(n.startswith("3 scan of 600 files") for n in names)
    assert any(n.startswith("4 cut latency local") for n in names)
    assert any(n.startswith("5 restart after SIGKILL") for n in names)
    assert any(n.startswith("7 steady scan of 300 files, local") for n in names)
    assert any(n.startswith("8 CSV -> Parquet partitioned") for n in names)
    assert "All benchmarks" in done.stdout


@pytest.mark.slow
def test_hdfs_benchmark_runs_every_part_on_the_real_cluster(
    hdfs_sandbox: Sandbox, tmp_path: Path
) -> None:
    """bench_hdfs.py on the session's cluster (named by flags: no second cluster started)."""
    info = hdfs_sandbox.info
    work = tmp_path / "work"
    done = run_script(
        "bench_hdfs.py",
        *("--hdfs", info.hdfs, "--webhdfs", info.webhdfs, "--conf-dir", info.conf_dir),
        *("--mb", "1", "--files", "2", "--repeat", "1", "--period", "0.2"),
        *("--cuts", "2", "--rate-mb", "0.5", "--file-kb", "16", "--durable-writes", "3"),
        *("--trials", "1", "--lines", "1000", "--parts", "pipeline,cuts,recovery,process,steady"),
        *("--steady-s", "2", "--steady-rate-mb", "0.5", "--steady-file-mb", "0.1"),
        *("--json", str(tmp_path / "hdfs.json"), "--work", str(work)),
        timeout=600,
    )
    assert done.returncode == 0, failed(done)
    assert "load average before" in done.stdout and "results:" in done.stdout
    assert not any(work.iterdir()), "the benchmark left its scratch files behind"
    data = load(tmp_path, "hdfs")
    assert data["output_correct"] is True
    assert data["cluster"]["sandbox"] is None  # the flags' cluster, not a new sandbox
    assert len(data["load_average"]["before"]) == len(data["load_average"]["after"]) == 3

    pipeline = data["pipeline"]
    assert set(pipeline["backends"]) == {"hdfs", "webhdfs"}
    for backend in pipeline["backends"].values():
        assert backend["output_correct"] is True
        ours, plain = backend["pipeline"], backend["plain_copy"]
        assert ours["mb_per_s"] > 0 and plain["mb_per_s"] > 0
        # The rates are rounded to 0.1 MB/s: the ratio lies within what that rounding allows.
        low = (ours["mb_per_s"] - 0.05) / (plain["mb_per_s"] + 0.05)
        high = (ours["mb_per_s"] + 0.05) / max(plain["mb_per_s"] - 0.05, 1e-9)
        assert low * 0.99 <= backend["ratio"] <= high * 1.01
        assert ours["cuts"][0] >= 1 and ours["output_files"][0] >= 1

    cuts = data["cut_latency"]["hdfs"]
    assert cuts["cuts"]["output_correct"] is True
    assert cuts["cuts"]["cuts"] >= 2 and len(cuts["cuts"]["samples_ms"]) == cuts["cuts"]["cuts"]
    assert 0 < cuts["cuts"]["p50_ms"] <= cuts["cuts"]["p99_ms"] <= cuts["cuts"]["max_ms"]
    floor = cuts["durable_write"]
    assert floor["writes"] == 3 and set(floor["step_p50_ms"]) == {
        "create",
        "write",
        "hsync",
        "close",
    }

    recovery = data["recovery"]
    assert recovery["output_correct"] is True
    for side in ("after_sigkill_s", "fresh_start_s"):
        times = recovery[side]
        assert 0 < times["recovered"] <= times["first_cut"]
        assert times["first_file"] > 0
    assert [r["run"] for r in recovery["restarts"]] == [2]
    assert recovery["restarts"][0]["reset_s"] is not None  # read from the restart's log

    process = data["process"]  # whole processes, output checked line for line by the script
    assert process["input_files"] == 2 and len(process["samples"]["ours"]) == 1
    assert process["ratio"] == round(process["plain_copy_s"] / process["ours_s"], 2)

    steady = data["steady"]  # both sides published every landed byte (checked by the script)
    for who in ("ours", "plain_copy"):
        assert steady[who]["landed_mb"] > 0 and steady[who]["mb_per_s"] > 0
        assert steady[who]["mean_latency_s"] >= 0 and len(steady["runs"][who]) == 1

    # run_all tabulates it.
    table = run_script("run_all.py", "--table-only", "--results", str(tmp_path))
    assert table.returncode == 0, table.stderr
    names = [
        row["benchmark"] for row in json.loads((tmp_path / "summary.json").read_text())["table"]
    ]
    assert any(n.startswith("6 real HDFS: pipeline") for n in names)
    assert any(n.startswith("6 real HDFS: cut latency hdfs://") for n in names)
    assert any(n.startswith("6 real HDFS: restart after SIGKILL") for n in names)


def test_a_failing_benchmark_is_reported_not_hidden(tmp_path: Path) -> None:
    done = run_script("bench_scan.py", "--late-windows", "x", "--json", str(tmp_path / "s.json"))
    assert done.returncode != 0
    assert not (tmp_path / "s.json").exists()


def test_the_shared_harness_alternates_checks_each_run_and_reports_medians() -> None:
    """bench/common.Comparison, the part every speed benchmark shares: a warm-up of each, then
    rounds of each in turn; a wrong output stops the race; ratios of medians."""
    from bench.common import Comparison

    calls: list[str] = []
    times = {"a": iter([9.0, 1.0, 2.0, 3.0]), "b": iter([9.0, 2.0, 4.0, 6.0])}

    def entrant(key: str) -> Any:
        def run(tag: str) -> float:
            calls.append(f"{key}:{tag}")
            return next(times[key])

        return run

    race = Comparison(mb=12.0)
    race.add("a", "pipeline A", entrant("a"))
    race.add("b", "pipeline B", entrant("b"))
    checked: list[tuple[str, str]] = []
    race.race(3, check=lambda key, tag: checked.append((key, tag)))
    assert calls == ["a:warm", "b:warm", "a:0", "b:0", "a:1", "b:1", "a:2", "b:2"]
    assert checked == [("a", "0"), ("b", "0"), ("a", "1"), ("b", "1"), ("a", "2"), ("b", "2")]
    assert race.median("a") == 2.0 and race.median("b") == 4.0
    assert race.ratio("b", "a") == 2.0  # A ran twice as fast as B
    figures = race.figures({"a": "ours"})
    assert figures["ours"] == {"seconds": [1.0, 2.0, 3.0], "mb_per_s": 6.0}
    assert figures["b"]["mb_per_s"] == 3.0
    assert len(figures["load_average_before"]) == len(figures["load_average_after"]) == 3

    def wrong(key: str, tag: str) -> None:
        raise RuntimeError(f"{key} run {tag} wrote 0 bytes")

    failing = Comparison(mb=1.0)
    failing.add("a", "A", lambda tag: 1.0)
    with pytest.raises(RuntimeError, match="a run 0 wrote 0 bytes"):
        failing.race(2, check=wrong)


def test_the_shared_harness_keeps_each_runs_other_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run may return figures besides its seconds (CPU seconds, cuts): they are kept per run,
    their medians and ratios computed like the seconds', and shown as columns of the table."""
    from bench.common import Comparison

    cpu = {"a": iter([1.0, 2.0, 3.0]), "b": iter([4.0, 4.0, 5.0])}
    race = Comparison(mb=4.0)
    race.add("a", "pipeline A", lambda tag: {"seconds": 2.0, "cpu_seconds": next(cpu["a"])})
    race.add("b", "pipeline B", lambda tag: {"seconds": 4.0, "cpu_seconds": next(cpu["b"])})
    race.race(3, warm=False)
    assert race.median("a", "cpu_seconds") == 2.0
    assert race.ratio("b", "a", figure="cpu_seconds") == 2.0
    assert race.figures()["a"] == {
        "seconds": [2.0, 2.0, 2.0],
        "cpu_seconds": [1.0, 2.0, 3.0],
        "mb_per_s": 2.0,
    }
    race.print("two pipelines", baseline="b", columns={"CPU seconds": "cpu_seconds"})
    header, _, row_a, row_b = capsys.readouterr().out.splitlines()[2:6]
    assert header.split("  ")[0] == "pipeline" and "ratio to pipeline B" in header
    assert row_a.split() == ["pipeline", "A", "2", "2", "2", "2", "2.00", "2.00", "2.00"]
    assert row_b.split() == ["pipeline", "B", "1", "4", "1", "4", "4.00", "4.00", "4.00"]


def test_a_whole_process_run_reports_its_memory_and_keeps_its_output_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/common.run_measured: a process's peak RSS (one that holds 60 MB shows it), its
    output in the log asked for, a failure named by the log's end; and the table shows the
    process tree's memory beside every time, asked for or not."""
    from bench.common import Comparison, run_measured

    log = tmp_path / "run.log"
    holds = "import sys, time; b = bytearray(60 << 20); print('out'); print('err', file=sys.stderr)"
    figures = run_measured([sys.executable, "-c", holds + "; time.sleep(0.3)"], tmp_path, log=log)
    assert figures["peak_rss_mb"] >= 60 and figures["peak_tree_rss_mb"] >= figures["peak_rss_mb"]
    assert sorted(log.read_text().split()) == ["err", "out"]  # both streams
    fails = [sys.executable, "-c", "import sys; print('the cause'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match="the cause"):
        run_measured(fails, tmp_path, log=log)
    race = Comparison(mb=1.0)
    race.add("a", "pipeline A", lambda tag: {"seconds": 1.0, "peak_tree_rss_mb": 70.0})
    race.race(1, warm=False)
    race.print("one pipeline")
    header, _, row = capsys.readouterr().out.splitlines()[2:5]
    assert "tree MB (median)" in header and row.split()[-2] == "70"
