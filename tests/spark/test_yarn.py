"""On YARN (``yarn_sandbox``: Hadoop's MiniYARNCluster beside the sandbox's HDFS, 2 NodeManagers):
the sandbox's ResourceManager, and ``hdfs-region run --engine spark`` with ``master = "yarn"``,
landing, output and checkpoints on the sandbox's hdfs://.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from operators.sandbox import Sandbox


def _yarn_site(sandbox: Sandbox) -> dict[str, str]:
    root = ET.parse(Path(sandbox.info.conf_dir) / "yarn-site.xml").getroot()
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


def _active_nodes(sandbox: Sandbox) -> int:
    return int(sandbox.command("status")["nodemanagers_running"])


def test_the_sandbox_runs_yarn_whose_nodemanagers_stop_and_start(yarn_sandbox: Sandbox) -> None:
    """The ready line names the ResourceManager, conf_dir's yarn-site.xml points clients at it,
    and a NodeManager stopped leaves the cluster until started again."""
    info = yarn_sandbox.info
    assert info.yarn is not None and info.nodemanagers == 2
    assert _yarn_site(yarn_sandbox)["yarn.resourcemanager.address"] == info.yarn
    assert _active_nodes(yarn_sandbox) == 2
    yarn_sandbox.command("stop-nodemanager 1")
    try:
        assert _active_nodes(yarn_sandbox) == 1
    finally:
        yarn_sandbox.command("start-nodemanager 1")
    assert _active_nodes(yarn_sandbox) == 2
    with pytest.raises(Exception, match="nodemanager 1 is not stopped"):
        yarn_sandbox.command("start-nodemanager 1")
