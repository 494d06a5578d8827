"""The fault campaign: crash and break the real ``hdfs-region run`` command, count every record.

The shared setup lives in four modules, re-exported here for the benchmarks that reuse it
(bench_recovery.py, bench/real_hdfs/recovery.py): :mod:`~bench.campaign.workspace` (a pipeline
in a work directory and its runs), :mod:`~bench.campaign.arrivals` (input files as landing
directories see them), :mod:`~bench.campaign.processes` (tracking and killing runs) and
:mod:`~bench.campaign.outcome` (a table row; output compared with input record by record).
Each scenario family has its module, named as its ``--only`` name (``kills`` also runs
``spark``); :mod:`~bench.campaign.cli` holds the registry and the command line that
``bench/fault_campaign.py`` runs.
"""

from bench.campaign.arrivals import Arrivals, Feeder
from bench.campaign.outcome import Outcome, Tally, tally
from bench.campaign.processes import kill, kill_all, last_error, track, wait_for
from bench.campaign.workspace import PACE_MODULE, Workspace, progressed

__all__ = [
    "PACE_MODULE",
    "Arrivals",
    "Feeder",
    "Outcome",
    "Tally",
    "Workspace",
    "kill",
    "kill_all",
    "last_error",
    "progressed",
    "tally",
    "track",
    "wait_for",
]
