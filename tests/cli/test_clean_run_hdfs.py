"""A clean first run into a new ``hdfs://`` output says nothing alarming: no lease recovered,
no background close failed (the process read back the sink's owner.json, which it had written
itself and whose close was still under way, and ended its own lease)."""

from __future__ import annotations

import posixpath
import re
import time

import pytest

from tests.cli.conftest import PipelineDir, cli
from tests.conftest import CLUSTER_USER, real_fs

SETTINGS = """\
engine = "local"
[filesystem]
uri = "{uri}"
user = "{user}"
{conf}
[region]
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{root}/landing"
[sink]
file = "{root}/out/part-%FILENUM.txt"
"""


@pytest.mark.parametrize("webhdfs", [True, False], ids=["HADOOP_CONF_DIR", "bare URI"])
def test_a_clean_first_run_into_a_new_hdfs_output_warns_of_nothing(
    request: pytest.FixtureRequest, pdir: PipelineDir, webhdfs: bool
) -> None:
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox")
    for attempt in range(3):  # the close races the read: try it more than once
        root = posixpath.join(base, f"clean-{time.monotonic_ns()}")
        fs.mkdirs(posixpath.join(root, "landing"))
        writer = fs.create(posixpath.join(root, "landing", "a.txt"))
        writer.write(b"".join(b"line %d\n" % i for i in range(5000)))
        writer.close()
        conf = f'config_dir = "{sandbox.info.conf_dir}"' if webhdfs else ""
        cfg = pdir.write_config(
            SETTINGS.format(uri=sandbox.info.hdfs, user=CLUSTER_USER, conf=conf, root=root),
            name=f"p{attempt}.toml",
        )
        done = cli("run", str(cfg), "--available-now", "--no-progress", HADOOP_CONF_DIR="")
        assert done.returncode == 0, done.stderr
        said = re.findall(r" (?:WARNING|ERROR) +(\S+: .*)", done.stderr)
        # The one WARNING a bare URI has reason to give: no fileIds for the scan.
        alarming = [s for s in said if "no fileIds without the cluster's WebHDFS" not in s]
        assert alarming == [], done.stderr
        out = posixpath.join(root, "out")
        published = [s for s in fs.list_dir(out) if not s.name.startswith((".", "_"))]
        assert sum(s.size for s in published) == sum(len(b"line %d\n" % i) for i in range(5000))
