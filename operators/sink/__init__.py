"""HDFS2FileSink: records into rolling, templated files that survive crashes without loss or
(in exactly-once mode) duplication.

A file goes through three stages (``publish="atomic"``, the default):

1. *open*: written under a hidden in-progress name in its final directory,
   ``.<final name>~<sink name>.inprogress``; readers that skip hidden names never see it.
2. *pending*: closed (rolled, punctuation, :meth:`HDFS2FileSink.finish`) and synced; it waits
   until a cut that covers the close completes. On HDFS the close itself lands in the
   background (it waits for a DataNode's report of the last block); the cut does not wait
   for it.
3. *published*: renamed to its final name in :meth:`HDFS2FileSink.on_cut_completed`, once its
   close has landed (a reset recovers the lease of one a killed process left open).

With ``publish="visible"`` files are written under their final names: readers see them grow,
including records no completed cut covers yet, which a crash takes back (truncate) and writes
again. Only a file whose close a completed cut covers is final. An empty marker
``.<final name>~<sink name>.open`` stands for the in-progress name until a completed cut covers
the file, so recovery can still find files opened after the cut.

Recovery (:meth:`HDFS2FileSink.reset`) needs no memory of the crashed process: the checkpointed
state names the open file, its size and the pending files; every other in-progress file or
marker of this sink in the output directories belongs to work after the cut and is deleted.
The sink name must therefore be unique among sinks that share an output directory.

The package, along its seams: :mod:`.settings` (the parameters, checked when made),
:mod:`.layout` (final and side names, directories), :mod:`.records` (records to bytes, bad-record
routing), :mod:`.recovery` (the state, orphans, restore), :mod:`.operator` (the lifecycle),
:mod:`.rolling` (when a file is complete), :mod:`.templating` (file-name templates), :mod:`.publish`
(the rename, repeatable), :mod:`.manifest` (what was published, per cut) and :mod:`.owner` (one
job per output directory).

Bad records (a value of the wrong type or not encodable, a record that is not a (name, value) pair,
a file name from data that :mod:`operators.common.safepath` refuses) follow ``on_bad_record``:
``fail``
raises :class:`BadRecordError` (the region resets and, repeated, fails), ``skip`` drops the record
with a log line naming its index, value and reason, ``reject`` writes it with the reason as one JSON
line into ``rejects_file``: a second, internal sink inside the base directory whose state is part of
this sink's, so rejects are exactly-once like the output (a rejects file is closed at every cut that
saw rejects and published when the cut completes). Default: ``reject`` when ``rejects_file`` is set,
else ``skip`` logged at ERROR. Either way bad records are counted in
:attr:`SinkMetrics.bad_records`.

In file-attribute mode up to ``max_open_files`` files stay open, so interleaved names write one
file each; the least recently written closes when a new name needs a place, and a file that got
no record since the previous cut closes at the cut. Each open file is in the state and comes
back to its size at the cut on a reset, like the current one.

A file name from data that was written before (``A, B, A``) or names an existing file is not a
bad record: ``on_returning_name="new_file"`` (the default) writes its records to the first free
numbered name (``orders.csv`` -> ``orders-1.csv``); ``"overwrite"`` replaces the earlier file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.common.lazy import lazy_exports

if TYPE_CHECKING:
    from operators.sink.metrics import SinkMetrics
    from operators.sink.operator import HDFS2FileSink
    from operators.sink.settings import SinkSettings

__all__ = ["HDFS2FileSink", "SinkMetrics", "SinkSettings"]

#: Where each public name lives, imported when first used (lazy_exports).
_LAZY = {
    "HDFS2FileSink": "operators.sink.operator",
    "SinkMetrics": "operators.sink.metrics",
    "SinkSettings": "operators.sink.settings",
}
__getattr__ = lazy_exports(__name__, _LAZY)
