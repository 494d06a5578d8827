"""Memory as the input grows: ``hdfs-region run --engine local --available-now`` over text lines
of each size asked (1 GB and 10 GB by default; whole processes, one run of each size), lines out
compressed (so that the output stays small on the disk: gzip by default, which Python's own
zlib writes; ``--compression zstd`` is written through Arrow, whose import costs about 40 MB),
against a plain loop in Python over the same files (4 MiB reads, one gzip member or zstd frame
each, written). Each row: the seconds
and the peak RSS of the process and of its tree (the local engine starts no other process).
Every output is checked: its lines, decompressed, are the input's count. The larger inputs
extend the smaller ones (their files are kept), so 10 GB is written once. Prints a table and
writes ``bench/results/memory.json``.

    python -m bench.bench_memory               # 1 GB and 10 GB (about 11 GB of disk)
    python -m bench.bench_memory --gb 0.1,0.5 --file-mb 10    # a quicker run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    add_common_args,
    load_average,
    machine,
    make_text_files,
    print_table,
    run_measured,
    scratch,
    write_json,
)

SETTINGS = """\
engine = "local"
[region]
checkpoint_dir = "{work}/ck-{tag}"
[scan]
directory = "{work}/in-{tag}"
after_read = "keep"
[sink]
file = "{work}/out-{tag}/part-%FILENUM.txt.{suffix}"
compression = "{codec}"
bytes_per_file = 1073741824
"""

PLAIN = """\
import gzip, os, sys
src, out, codec = sys.argv[1], sys.argv[2], sys.argv[3]
if codec == "zstd":
    import pyarrow as pa
os.makedirs(out, exist_ok=True)
for name in sorted(os.listdir(src)):
    target = os.path.join(out, name + (".zst" if codec == "zstd" else ".gz"))
    with open(os.path.join(src, name), "rb") as f, open(target, "wb") as o:
        while chunk := f.read(4 << 20):
            if codec == "zstd":
                o.write(pa.compress(chunk, codec="zstd", asbytes=True))
            else:
                o.write(gzip.compress(chunk, compresslevel=6, mtime=0))
        o.flush()
        os.fsync(o.fileno())
"""


def lines_in(directory: Path) -> int:
    """The lines of every gzip or zstd file under ``directory`` (concatenated members or
    frames), decompressed."""
    import gzip

    count = 0
    for path in sorted(p for p in directory.rglob("*") if p.suffix in (".gz", ".zst")):
        opener: Any = gzip.open if path.suffix == ".gz" else _zstd
        with opener(path) as stream:
            while chunk := stream.read(16 << 20):
                count += chunk.count(b"\n")
    return count


def _zstd(path: Path) -> Any:
    import pyarrow as pa

    return pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")


def _remove_output(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.suffix in (".gz", ".zst"):
            path.unlink()


def grow_input(work: Path, gb: float, file_mb: float, made: list[Path], lines: list[int]) -> Path:
    """The input of ``gb`` GB in files of ``file_mb`` MB: the files made for smaller sizes, and
    more, linked into a directory of its own (each run reads only its own directory)."""
    wanted = max(1, round(gb * 1000 / file_mb))
    pool = work / "pool"
    while len(made) < wanted:
        i = len(made)
        _, n = make_text_files(pool / f"{i:05d}", file_mb, 1, seed=i, prefix=f"f{i}-")
        made.append(next((pool / f"{i:05d}").iterdir()))
        lines.append(n)
    directory = work / f"in-{gb:g}"
    directory.mkdir()
    for path in made[:wanted]:
        (directory / f"{path.parent.name}.txt").hardlink_to(path)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", default="1,10", help="input sizes in GB (default 1,10)")
    parser.add_argument("--file-mb", type=float, default=100.0, help="MB per file (default 100)")
    parser.add_argument(
        "--compression", choices=("gzip", "zstd"), default="gzip", help="of the output (gzip)"
    )
    add_common_args(parser, "memory")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.gb.split(",")]
    rows: list[list[Any]] = []
    result: dict[str, Any] = {
        "benchmark": "memory",
        "sizes_gb": sizes,
        "compression": args.compression,
        "runs": {},
        "machine": machine(),
    }
    load_before = load_average()
    with scratch(args.work, "bench-memory-") as work:
        made: list[Path] = []
        lines: list[int] = []
        (work / "plain.py").write_text(PLAIN)
        for gb in sizes:
            src = grow_input(work, gb, args.file_mb, made, lines)
            tag = f"{gb:g}"
            expected = sum(lines[: len(list(src.iterdir()))])
            config = work / f"ours-{tag}.toml"
            suffix = "gz" if args.compression == "gzip" else "zst"
            config.write_text(
                SETTINGS.format(work=work, tag=tag, codec=args.compression, suffix=suffix)
            )
            command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
            ours = run_measured(command, work)
            if lines_in(work / f"out-{tag}") != expected:
                raise RuntimeError(f"hdfs-region at {gb:g} GB did not write {expected} lines")
            _remove_output(work / f"out-{tag}")  # room on the disk for the next run
            plain = run_measured([sys.executable, str(work / "plain.py"), str(src),
                                  str(work / f"plain-{tag}"), args.compression], work)  # fmt: skip
            if lines_in(work / f"plain-{tag}") != expected:
                raise RuntimeError(f"the plain loop at {gb:g} GB did not write {expected} lines")
            _remove_output(work / f"plain-{tag}")
            for name, figures in (("hdfs-region run --engine local", ours), ("plain loop", plain)):
                rows.append(
                    [
                        f"{gb:g} GB",
                        name,
                        figures["seconds"],
                        gb * 1000 / figures["seconds"],
                        figures["peak_rss_mb"],
                        figures["peak_tree_rss_mb"],
                    ]
                )
            result["runs"][tag] = {"ours": ours, "plain": plain, "lines": expected}
    result["load_average_before"], result["load_average_after"] = load_before, load_average()
    print_table(
        f"memory as the input grows: whole process, lines to {args.compression}'d lines, one run "
        "of each",
        ["input", "run", "seconds", "MB/s", "peak RSS MB", "tree MB"],
        rows,
    )
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {load_average()}")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
