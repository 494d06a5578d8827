"""Run every benchmark (each in its own process), print one combined table and write
``bench/results/summary.json``.

    python bench/run_all.py                  # full sizes (about 10 minutes on 2 cores)
    python bench/run_all.py --quick          # small sizes, to check that everything runs
    python bench/run_all.py --skip spark     # without the Spark benchmark
    python bench/run_all.py --campaign       # also the fault campaign
    python bench/run_all.py --table-only     # only print the table of the results present

The Spark benchmark (bench/bench_spark.py) runs when the file is present. The real-HDFS benchmark
(bench/bench_hdfs.py, about 4 minutes at full size) starts a sandbox cluster and is skipped when
Java is missing (``--skip hdfs`` leaves it out). The Flink peer (bench/bench_flink.py, 200 MB,
about 5 minutes) is skipped where no interpreter with apache-flink is found.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, RESULTS_DIR, machine, print_table

BENCH = Path(__file__).resolve().parent

#: name -> (script, arguments of a quick run)
BENCHMARKS: dict[str, tuple[str, list[str]]] = {
    "pipeline": ("bench_pipeline.py", ["--mb", "20", "--files", "5", "--repeat", "2"]),
    "spark": ("bench_spark.py", ["--mb", "10", "--repeat", "1"]),
    "spark_engine": ("bench_spark_engine.py", ["--mb", "20", "--repeat", "1"]),
    "scan": ("bench_scan.py", ["--files", "10000", "--repeat", "3"]),
    "cut_latency": ("bench_cut_latency.py", ["--cuts", "10"]),
    "recovery": ("bench_recovery.py", ["--trials", "2"]),
    "hdfs": (
        "bench_hdfs.py",
        ["--mb", "16", "--files", "4", "--repeat", "1", "--cuts", "10", "--trials", "1"],
    ),
    "curated": ("bench_curated.py", ["--mb", "20", "--repeat", "1"]),
    "flink": ("bench_flink.py", ["--mb", "20", "--repeat", "1", "--no-rerun"]),
    "campaign": ("fault_campaign.py", ["--kills", "3", "--spark-kills", "0"]),
    "listing": (
        "bench_listing.py",
        ["--local-files", "10000,100000", "--hdfs-files", "10000", "--repeat", "3"],
    ),
}


#: How bench_spark_engine.py's contenders read in the table.
_ENGINE_ROWS = {
    "fused": "spark, fused",
    "streaming": "spark, streaming",
    "local": "--engine local",
}


def load_one(name: str, results: Path) -> dict[str, Any]:
    """The result a benchmark wrote earlier, if any."""
    script = BENCHMARKS[name][0]
    out = results / f"{name}.json"
    if not out.exists():
        return {"status": "absent", "script": script}
    return {"status": "ok", "script": script, "result": json.loads(out.read_text())}


def unavailable(name: str) -> str | None:
    """Why a benchmark cannot run on this machine, or ``None``."""
    if name == "hdfs":
        from operators.sandbox import missing_tools

        # Maven is needed only once, to resolve the sandbox's classpath.
        return missing_tools(need_maven=False)
    if name == "flink":
        from bench.bench_flink import INSTALL, flink_python

        # PyFlink lives in an interpreter of its own, not the project's (bench_flink.py).
        return None if flink_python(None) else f"pyflink not found; to install it: {INSTALL}"
    return None


def run_one(name: str, quick: bool, results: Path) -> dict[str, Any]:
    script, quick_args = BENCHMARKS[name]
    path = BENCH / script
    if not path.exists():
        return {"status": "absent", "script": script}
    problem = unavailable(name)
    if problem is not None:
        print(f"\n=== {name}: skipped: {problem}", flush=True)
        return {"status": "skipped", "script": script, "reason": problem}
    out = results / f"{name}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(path), *(quick_args if quick else []), "--json", str(out)]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    started = time.perf_counter()
    code = subprocess.call(cmd, cwd=REPO)
    seconds = round(time.perf_counter() - started, 1)
    if code != 0 or not out.exists():
        return {"status": f"failed (exit {code})", "script": script, "seconds": seconds}
    data: dict[str, Any] = json.loads(out.read_text())
    return {"status": "ok", "script": script, "seconds": seconds, "result": data}


def _met(value: Any) -> Any:
    return "-" if value is None else bool(value)


def rows_of(name: str, entry: dict[str, Any]) -> list[list[Any]]:
    """Rows of the combined table: benchmark, ours, baseline, ratio, target, met."""
    if entry["status"] != "ok":
        return [[name, entry["status"], "-", "-", "-", "-"]]
    r = entry["result"]
    if name == "pipeline":
        return [
            [
                "1 in-process pipeline vs plain loop (MB/s)",
                r["pipeline"]["mb_per_s"],
                r["plain_loop"]["mb_per_s"],
                r["ratio"],
                r["target"],
                _met(r["target_met"]),
            ]
        ]
    if name == "spark":
        ratio, fused = r.get("ratio"), r.get("fused_ratio")
        rows = [
            [
                "2 Spark hdfs_scan->hdfs_sink vs text->text, one session (MB/s)",
                r["hdfs_scan_to_hdfs_sink"]["mb_per_s"],
                r["spark_text_to_text"]["mb_per_s"],
                ratio,
                "-",
                "-",
            ]
        ]
        if fused is not None:
            rows.append(
                [
                    "2 Spark fused vs text->text, one session (MB/s)",
                    r["fused"]["mb_per_s"],
                    r["spark_text_to_text"]["mb_per_s"],
                    fused,
                    "ratio >= 1.5",
                    _met(fused >= 1.5),
                ]
            )
        return rows
    if name == "spark_engine":
        medians, ratios = r["median_seconds"], r["ratio_to_builtin"]
        return [
            [
                f"2 hdfs-region run ({_ENGINE_ROWS.get(kind, kind)}) vs built-in script, "
                "whole process (s)",
                medians[kind],
                medians.get("builtin", "-"),
                ratios[kind],
                "ratio >= 1.0" if kind == "fused" else "-",
                _met(ratios[kind] >= 1.0) if kind == "fused" else "-",
            ]
            for kind in medians
            if kind != "builtin"
        ]
    if name == "scan":
        sizes = r["checkpoint_sizes"]["0"]
        return [
            [
                f"3 scan of {r['files']} files vs scandir+stat+sort (s)",
                round(min(r["scan_and_plan"]["seconds"]), 3),
                round(min(r["scandir_stat_sort"]["seconds"]), 3),
                r["best_ratio"],
                "ratio <= 1.2 (best of N)",
                r["best_ratio"] <= 1.2,
            ],
            [
                "3 scan checkpoint, no late window (bytes)",
                max(s["checkpoint_file_bytes"] for s in sizes),
                "-",
                "-",
                "constant, < 1 KB",
                _met(r["target_met"]["checkpoint"]),
            ],
        ]
    if name == "cut_latency":
        b = r["backends"]
        floor = r["fsync_floor"]
        rows = []
        if "local" in b:
            rows.append(
                [
                    "4 cut latency local p50 / p99 (ms)",
                    f"{b['local']['p50_ms']} / {b['local']['p99_ms']}",
                    f"{floor['p50_ms']} / {floor['p99_ms']} (one durable write)",
                    r["p50_over_fsync_floor"],
                    "p99 < 20 ms",
                    _met(r["target_met"]),
                ]
            )
        if "webhdfs" in b:
            rows.append(
                [
                    "4 cut latency WebHDFS stand-in p50 / p99 (ms)",
                    f"{b['webhdfs']['p50_ms']} / {b['webhdfs']['p99_ms']}",
                    "-",
                    "-",
                    "-",
                    "-",
                ]
            )
        return rows
    if name == "recovery":
        return [
            [
                "5 restart after SIGKILL to first new file (s)",
                r["after_sigkill_s"]["first_file"],
                f"{r['fresh_start_s']['first_file']} (fresh start)",
                r["ratio_to_fresh_start"]["first_file"],
                "-",
                "-",
            ]
        ]
    if name == "hdfs":
        return hdfs_rows(r)
    if name == "listing":
        return [
            [
                f"7 steady scan of {row['files']} files, {backend} (s)",
                round(row["median_seconds"]["steady scan"], 3),
                f"{round(row['median_seconds'][row['baseline']], 3)} ({row['baseline']})",
                row["ratio"]["steady scan"],
                "ratio <= 1.2",
                row["ratio"]["steady scan"] <= 1.2,
            ]
            for backend in ("local", "hdfs", "webhdfs")
            for row in r.get(backend, {}).get("sizes", [])
        ]
    if name == "curated":
        figures = r["figures"]
        rows = [
            [
                "8 CSV -> Parquet partitioned, local engine vs plain pyarrow loop (MB/s)",
                figures["ours"]["mb_per_s"],
                figures["plain"]["mb_per_s"],
                r["ratio_to_plain_pyarrow"],
                "ratio >= 0.8",
                r["ratio_to_plain_pyarrow"] >= 0.8,
            ]
        ]
        if "spark" in figures:
            rows.append(
                [
                    "8 CSV -> Parquet partitioned, local engine vs Spark's built-in job (MB/s)",
                    figures["ours"]["mb_per_s"],
                    figures["spark"]["mb_per_s"],
                    r["ratio_to_spark"],
                    "ratio >= 1.0",
                    r["ratio_to_spark"] >= 1.0,
                ]
            )
        return rows
    if name == "flink":
        medians, ratios = r["median_seconds"], r["ratio_to_flink_p2"] or {}
        return [
            [
                f"9 {kind} vs Flink FileSource -> FileSink p=2, whole process (s)",
                medians[kind],
                medians.get("flink-p2", "-"),
                ratios.get(kind, "-"),
                "-",
                "-",
            ]
            for kind in medians
            if kind != "flink-p2"
        ]
    if name == "campaign":
        return [
            [
                f"fault campaign ({len(r['rows'])} scenarios)",
                f"lost {r['total_lost']}, duplicated {r['total_duplicated']}",
                "-",
                "-",
                "every scenario ok",
                r["all_ok"],
            ]
        ]
    return []


def hdfs_rows(r: dict[str, Any]) -> list[list[Any]]:
    """Rows of bench_hdfs.py: whichever of its parts ran."""
    rows: list[list[Any]] = []
    for backend, b in r.get("pipeline", {}).get("backends", {}).items():
        rows.append(
            [
                f"6 real HDFS: pipeline vs plain copy through {backend}:// (MB/s)",
                b["pipeline"]["mb_per_s"],
                b["plain_copy"]["mb_per_s"],
                b["ratio"],
                "-",
                "-",
            ]
        )
    for backend, c in r.get("cut_latency", {}).items():
        cuts, floor = c["cuts"], c["durable_write"]
        rows.append(
            [
                f"6 real HDFS: cut latency {backend}:// p50 / p99 (ms)",
                f"{cuts['p50_ms']} / {cuts['p99_ms']}",
                f"{floor['p50_ms']} / {floor['p99_ms']} (one durable write)",
                c["p50_over_durable_write"],
                "-",
                "-",
            ]
        )
    if "recovery" in r:
        rec = r["recovery"]
        rows.append(
            [
                "6 real HDFS: restart after SIGKILL to first new file (s)",
                rec["after_sigkill_s"]["first_file"],
                f"{rec['fresh_start_s']['first_file']} (fresh start)",
                rec["ratio_to_fresh_start"]["first_file"],
                "-",
                "-",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--skip", default="", help="benchmarks to leave out, comma-separated")
    parser.add_argument("--campaign", action="store_true", help="also run the fault campaign")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="results directory")
    parser.add_argument(
        "--table-only", action="store_true", help="run nothing: tabulate the results present"
    )
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(BENCHMARKS)
    if unknown:
        parser.error(f"--skip: unknown benchmark(s) {sorted(unknown)} (known: {list(BENCHMARKS)})")
    names = [n for n in BENCHMARKS if n not in skip and (n != "campaign" or args.campaign)]
    args.results.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    if args.table_only:
        entries = {name: load_one(name, args.results) for name in names}
    else:
        entries = {name: run_one(name, args.quick, args.results) for name in names}
    rows = [
        row
        for name, entry in entries.items()
        if entry["status"] != "absent"
        for row in rows_of(name, entry)
    ]
    info = machine()
    print_table(
        f"All benchmarks ({info['cpus']} CPUs, Python {info['python']}, {info['date']}, "
        f"load {info['load_average']}"
        + ("" if args.table_only else f", {'quick' if args.quick else 'full'} sizes")
        + ")",
        ["benchmark", "ours", "baseline", "ratio", "target", "met"],
        rows,
    )
    summary = {
        "machine": info,
        "quick": args.quick,
        "seconds": round(time.perf_counter() - started, 1),
        "table": [
            dict(zip(["benchmark", "ours", "baseline", "ratio", "target", "met"], r, strict=True))
            for r in rows
        ],
        "benchmarks": entries,
    }
    out = args.results / "summary.json"
    out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"summary: {out}")
    return 0 if all(e["status"] in ("ok", "absent", "skipped") for e in entries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
