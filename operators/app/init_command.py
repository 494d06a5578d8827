"""``hdfs-region init [DIR]``: a commented ``pipeline.toml`` for a landing directory and an
output, checked by loading it as ``run`` would, and the next command to run.

Local paths are written as given (relative ones resolve against the file's folder, as every
path of a pipeline file does); ``hdfs://`` and ``webhdfs://`` URIs name the cluster, which also
holds the checkpoints (a recovery must reach them from wherever the job restarts)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from operators.app.config import PipelineConfigError, load_pipeline
from region.errors import ConfigError

__all__ = ["init_pipeline", "render"]

_REMOTE = ("hdfs://", "webhdfs://", "swebhdfs://")

_TEMPLATE = """\
# A pipeline of hdfs-region: every file landing in [scan] directory is read once, line by line,
# and written into rolling output files, exactly once even when the process is killed.
#
#     hdfs-region run {config}                  # until Ctrl-C or SIGTERM
#     hdfs-region run {config} --available-now  # what is there now, then exit (cron)
#     hdfs-region inspect {config}              # the cuts and each operator's state
#
# Every key with its default: docs/reference/configuration.md (IBM Streams names work too).

# "local": in-process, no JVM, starts in about a second (Spark starts a JVM first: tens of
# seconds), the same guarantees. "spark": the same operators on Spark (local mode by default),
# for [transform] sql, a YARN cluster or a job spread over executors. Keep this key: without
# it a run uses "spark", and a checkpoint directory belongs to the engine that wrote it.
engine = "{engine}"
{filesystem}
[region]
# A consistent cut every `period` (from the end of the previous one); "operator_driven" cuts
# after every input file instead.
trigger = "periodic"
period = "1s"
checkpoint_dir = {checkpoints}

[scan]
directory = {landing}
# Only these names (a regular expression on the whole base name); hidden names (.x, _x) and
# files still being copied (x._COPYING_) are never read.
# pattern = '.*\\.csv'
# Files younger than this are left for a later listing (writers that write in place).
# min_file_age = "10s"
# After every record of a file is published: "keep" it, "archive" it (archive_dir) or "delete".
after_read = "keep"

[source]
format = "line"          # or "binary" (blocks of block_size bytes)
encoding = "utf-8"
on_decode_error = "fail" # or "replace", "skip": bytes that are not utf-8 stop the run, named

[sink]
# One output file per 100,000 records; %FILENUM counts up and never repeats after a restart.
file = {output}
tuples_per_file = 100000
# A file no record reached for a minute is published anyway: the input may pause.
close_idle_after = "60s"
# "exactly_once": a crash never duplicates a record. Readers see only complete files.
delivery = "exactly_once"
publish = "atomic"
"""


def _filesystem_table(paths: list[str]) -> str:
    remote = [p for p in paths if p.startswith(_REMOTE)]
    if not remote:
        return ""
    parts = urlsplit(remote[0])
    return (
        "\n[filesystem]\n"
        "# The cluster the paths below are on (a Hadoop configuration directory, Kerberos and\n"
        "# TLS settings go here too: docs/secured.md).\n"
        f"uri = {_toml(f'{parts.scheme}://{parts.netloc}')}\n"
    )


def _toml(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's: quotes, backslashes and
    control characters escaped)."""
    return json.dumps(text, ensure_ascii=False)


def render(*, landing: str, output: str, engine: str, config: str) -> str:
    """The commented pipeline file for these paths."""
    remote = output if output.startswith(_REMOTE) else landing
    if remote.startswith(_REMOTE):
        parts = urlsplit(remote)
        checkpoints = f"{parts.scheme}://{parts.netloc}/checkpoints/{Path(output).name}"
    else:
        checkpoints = "checkpoints"
    return _TEMPLATE.format(
        engine=engine,
        filesystem=_filesystem_table([landing, output]),
        checkpoints=_toml(checkpoints),
        landing=_toml(landing),
        output=_toml(output.rstrip("/") + "/part-%FILENUM.txt"),
        config=shlex.quote(config),
    )


def init_pipeline(
    directory: Path, *, landing: str, output: str, engine: str, force: bool = False
) -> Path:
    """Write ``DIRECTORY/pipeline.toml`` and check that it loads; returns its path.

    Raises ``FileExistsError`` when the file exists (unless ``force``), and ``ConfigError``
    naming the options when the paths given make no valid pipeline (the output inside the
    landing directory, say): loaded from a hidden name beside it first, so that nothing is
    left behind and an existing file is replaced only by one that loads."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline.toml"
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists: give another DIR, or --force to replace it")
    text = render(landing=landing, output=output, engine=engine, config=str(path))
    trial = directory / f".pipeline.toml.{os.getpid()}.tmp"
    trial.write_text(text, encoding="utf-8")
    try:
        load_pipeline(str(trial))
        os.replace(trial, path)
    except PipelineConfigError as exc:
        msg = (
            f"--landing {landing!r} --output {output!r} make no valid pipeline, so {path} was "
            f"not written: {'; '.join(exc.problems)}"
        )
        raise ConfigError(msg) from None
    finally:
        trial.unlink(missing_ok=True)
    for local in (landing, output):
        if not local.startswith(_REMOTE):
            (directory / local).mkdir(parents=True, exist_ok=True)
    return path
