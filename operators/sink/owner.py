"""One job per output directory: the sink's own folder names the job that writes there.

Two jobs writing one output directory break each other without an error of their own: each
deletes the other's in-progress files as orphans of its own crashed attempts, and on Spark a
job takes the other's sink-log entries (numbered by batch) for batches it already published and
skips its own records. A job started over from deleted checkpoints is such another job too:
its batch numbers start again at 0.

So the first job to write stamps ``<output dir>/_hdfs_sink/owner.json`` (on Spark, in the sink
log's folder) with its checkpoints' id and location, and every later start of a job compares:
the same job goes on, another one is refused at start with the way forward. Both engines and
the ``hdfs_sink`` data source claim through :func:`claim_output`.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from region.atomic import dir_permission, read_whole, write_atomically
from region.errors import ConfigError
from region.fs import FileSystem

__all__ = ["OWNER_FILE", "SINK_DIR", "Owner", "check_output", "claim_output", "read_owner"]

logger = logging.getLogger(__name__)

#: The sink's own folder inside its output directory (hidden from readers by its ``_``).
SINK_DIR = "_hdfs_sink"
OWNER_FILE = "owner.json"


@dataclass(frozen=True, slots=True)
class Owner:
    """The job writing an output directory."""

    #: Where the job keeps its checkpoints, as users know it.
    checkpoint: str
    #: The id its checkpoints were created with (new when they are created afresh); ``None``
    #: when not known, and then the location decides.
    id: str | None = None

    def same_job(self, other: Owner) -> bool:
        if self.id is not None and other.id is not None:
            return self.id == other.id
        return self.same_place(other)

    def same_place(self, other: Owner) -> bool:
        """Whether both keep their checkpoints in one location."""
        return self.checkpoint.rstrip("/") == other.checkpoint.rstrip("/")

    def describe(self) -> str:
        return self.checkpoint + (f" (id {self.id})" if self.id else "")

    @classmethod
    def of_options(cls, options: Mapping[str, str]) -> Owner | None:
        """The owner a Spark query names in its options: ``job_id`` (given by
        ``hdfs-region run``), and ``checkpointLocation`` or ``queryName`` (Spark passes them
        to the sink); ``None`` when it names none."""
        lower = {key.lower(): value for key, value in options.items()}
        where = lower.get("checkpointlocation")
        if where is None and lower.get("queryname"):
            where = f"query {lower['queryname']}"
        job = lower.get("job_id") or lower.get("jobid")
        if where is None and job is None:
            return None
        return cls(where or f"job {job}", job)


def read_owner(fs: FileSystem, sink_dir: str) -> Owner | None:
    """The job recorded in ``sink_dir``, or ``None`` when none is (ValueError: damaged)."""
    path = posixpath.join(sink_dir, OWNER_FILE)
    try:
        raw = read_whole(fs, path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
        return Owner(str(record["checkpoint"]), record.get("id"))
    except (ValueError, KeyError, TypeError) as exc:
        shown = fs.display(path)
        msg = f"{shown} is damaged ({exc}): restore it, or remove it if one job writes here"
        raise ValueError(msg) from None


def check_output(fs: FileSystem, sink_dir: str, owner: Owner) -> bool:
    """Whether a job is recorded next to ``sink_dir`` (then it is ``owner``); ConfigError, naming
    both and what to do, when it is another job. Reads only."""
    theirs = read_owner(fs, sink_dir)
    if theirs is not None and not theirs.same_job(owner):
        shown = fs.display(sink_dir)
        output = fs.display(posixpath.dirname(sink_dir.rstrip("/")) or "/")
        msg = (
            f"output directory {output} is written by another job: {shown} belongs to the job "
            f"with checkpoints {theirs.describe()}, and this job's checkpoints are "
            f"{owner.describe()}. Two jobs writing one output directory delete each other's "
            "in-progress files and skip each other's batches: give this job its own output "
            "directory. If that job is retired for good (or its checkpoints were deleted to "
            f"start over), remove {shown} first; the files already published stay, and none "
            "is ever overwritten"
        )
        raise ConfigError(msg)
    return theirs is not None


def claim_output(
    fs: FileSystem, sink_dir: str, owner: Owner, *, permission: int | None = 0o640
) -> None:
    """Record ``owner`` as the job writing next to ``sink_dir``, or raise ConfigError (a
    permanent error) when another job is recorded there.

    1. Check the record (:func:`check_output`): ours, done; another job's, refused.
    2. None: write it, never over another, so that of two racing jobs one wins; the loser
       checks again.
    """
    if check_output(fs, sink_dir, owner):
        return
    body = json.dumps({"checkpoint": owner.checkpoint, "id": owner.id}, indent=1) + "\n"
    if not fs.exists(sink_dir):
        fs.mkdirs(sink_dir, permission=dir_permission(permission))
    try:
        write_atomically(
            fs,
            posixpath.join(sink_dir, OWNER_FILE),
            body.encode(),
            permission=permission,
            close_later=True,
        )
    except FileExistsError:  # another job claimed it meanwhile
        if not check_output(fs, sink_dir, owner):
            raise
        return
    logger.info(
        "%s: written by the job with checkpoints %s", fs.display(sink_dir), owner.describe()
    )
