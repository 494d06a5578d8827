"""A DataNode that dies while the job writes through ``hdfs://`` (``--only datanode``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.campaign.outcome import Outcome

__all__ = ["datanode_dies"]

#: The NameNode counts the stopped DataNode as live this long (a production NameNode: 630 s).
_DEAD_AFTER = 20.0


def datanode_dies(work: Path, args: argparse.Namespace) -> Outcome:
    """One of three DataNodes (replication 3) stops 5 s into an ``--available-now`` run that
    reads, checkpoints and writes on the cluster; it stays down. The run rides it out or ends
    with an error naming what failed; a run that failed is run again. Every record once."""
    # Imported here: it starts Java sandboxes, which only this scenario needs.
    from bench.bench_dead_datanode import job_run

    base = work / "datanode"
    base.mkdir(parents=True)
    result = job_run(base, _DEAD_AFTER, [], float(args.timeout) * 3, rerun=True)
    first = result["first_exit"]
    if first == 0:
        outcome = f"the run rode it out ({result['resets']} resets)"
    else:
        outcome = (
            f"first run: exit {first} ({result['error'][:120]}); next run exit {result['exit']}"
        )
    return Outcome(
        fault="a DataNode dies mid-run (1 of 3, stays down)",
        engine="local (hdfs://)",
        delivery="exactly_once",
        expected="recovery, or a clear error then recovery; nothing lost",
        outcome=outcome,
        lost=int(result["lost"]),
        duplicated=int(result["twice"]),
        corrupt=0,
        ok=result["exit"] == 0 and bool(result["every_record_once"]),
        message=str(result["error"]) if first != 0 else "",
        details={"first_exit": first, "took_s": result["took_s"], "records": result["records"]},
    )
