"""Where the settings file's paths go when a cluster is the default filesystem: a relative path
is taken from the settings file's folder on the local disk only; with a cluster as
``[filesystem]`` (a ``uri``, or ``fs.defaultFS`` of ``HADOOP_CONF_DIR``) it is refused at start,
naming the key, the value and both ways to write it. The filesystem a default came from is
logged once logging is set up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli
from tests.conftest import CLUSTER_USER, real_fs

RELATIVE = """\
    engine = "local"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    {filesystem}
"""


def hadoop_conf(directory: Path, default_fs: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name>"
        f"<value>{default_fs}</value></property></configuration>"
    )
    return directory


@pytest.mark.parametrize("how", ["HADOOP_CONF_DIR", "uri"])
def test_relative_paths_on_a_cluster_are_refused_naming_the_key_and_both_fixes(
    pdir: PipelineDir, tmp_path: Path, how: str
) -> None:
    pdir.add_files(2, 50)
    conf = hadoop_conf(tmp_path / "hadoop", "hdfs://127.0.0.1:9")
    table = '[filesystem]\nuri = "hdfs://127.0.0.1:9"' if how == "uri" else ""
    config = pdir.write_config(RELATIVE.format(filesystem=table))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"HADOOP_CONF_DIR": str(conf)} if how == "HADOOP_CONF_DIR" else {}
    done = cli("run", str(config), "--available-now", "--no-progress", cwd=elsewhere, **env)
    assert done.returncode == 2, done.stderr
    err = done.stderr
    assert "[scan] directory: 'landing' is a relative path" in err
    assert "[sink] file: 'out/part-%FILENUM.txt' is a relative path" in err
    assert "hdfs://127.0.0.1:9" in err
    # The two ways to write it: absolute on the cluster, or the local disk by URI.
    assert "'hdfs://127.0.0.1:9/user/" in err and "/landing'" in err
    assert f"'file://{pdir.landing}'" in err
    if how == "HADOOP_CONF_DIR":
        # Where the cluster came from, in the refusal and in the INFO line before it.
        assert f"fs.defaultFS of {conf / 'core-site.xml'}" in err
        assert " INFO " in err
    # Nothing ran: no checkpoint, no output.
    assert not (pdir.root / "checkpoints").exists() and not pdir.out.exists()


def test_the_default_filesystem_and_its_file_are_logged_at_start(
    pdir: PipelineDir, tmp_path: Path
) -> None:
    # Every path names its filesystem: the run never touches the (unreachable) cluster, and
    # the start still says which filesystem plain paths would be on, and why.
    pdir.add_files(1, 10)
    conf = hadoop_conf(tmp_path / "hadoop", "hdfs://127.0.0.1:9")
    config = pdir.write_config(
        f"""\
        engine = "local"
        [region]
        checkpoint_dir = "file://{pdir.root}/checkpoints"
        [scan]
        directory = "file://{pdir.landing}"
        [sink]
        file = "file://{pdir.out}/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now", "--no-progress", HADOOP_CONF_DIR=str(conf))
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "fs.defaultFS" in line]
    assert " INFO " in line and "hdfs://127.0.0.1:9" in line
    assert str(conf / "core-site.xml") in line and "in HADOOP_CONF_DIR" in line
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_switch_resolves_its_directory_by_the_same_rule(pdir: PipelineDir, tmp_path: Path) -> None:
    conf = hadoop_conf(tmp_path / "hadoop", "hdfs://127.0.0.1:9")
    config = pdir.write_config(
        """\
        engine = "local"
        [scan]
        directory = "/landing"
        [sink]
        file = "/out/part-%FILENUM.txt"
        """
    )
    refused = cli("switch", str(config), "B", cwd=tmp_path, HADOOP_CONF_DIR=str(conf))
    assert refused.returncode == 2
    assert "DIRECTORY: 'B' is a relative path" in refused.stderr
    assert f"'file://{pdir.root / 'B'}'" in refused.stderr
    assert not (pdir.root / "checkpoints" / "pipeline" / "control.json").exists()


def test_an_input_path_on_the_default_cluster_that_only_the_local_disk_has_is_refused(
    pdir: PipelineDir, request: pytest.FixtureRequest
) -> None:
    fs, _, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox's Hadoop configuration (HDFS_URI names another cluster)")
    pdir.add_files(1, 10)  # on the local disk
    config = pdir.write_config(
        f"""\
        engine = "local"
        [region]
        checkpoint_dir = "file://{pdir.root}/checkpoints"
        [scan]
        directory = "{pdir.landing}"
        [sink]
        file = "file://{pdir.out}/part-%FILENUM.txt"
        """
    )
    env = {"HADOOP_CONF_DIR": sandbox.info.conf_dir, "HADOOP_USER_NAME": CLUSTER_USER}
    args = ("run", str(config), "--available-now", "--no-progress")
    refused = cli(*args, **env)
    assert refused.returncode == 2, refused.stderr
    assert f"[scan] directory: '{pdir.landing}' is on {sandbox.info.hdfs}" in refused.stderr
    assert f"'file://{pdir.landing}'" in refused.stderr  # the local one, by URI
    assert f"'{sandbox.info.hdfs}{pdir.landing}'" in refused.stderr  # the cluster's
    assert not pdir.out.exists()
    # Once the cluster has the directory, the plain path is the cluster's, as Hadoop reads it.
    writer = fs.create(f"{pdir.landing}/c.txt")
    writer.write(b"from-the-cluster\n")
    writer.close()
    done = cli(*args, **env)
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["from-the-cluster"]


def test_a_relative_file_uri_is_the_settings_files_folder_too(
    pdir: PipelineDir, tmp_path: Path
) -> None:
    # ``file:landing`` is a relative path on the local disk, written as a URI: taken from the
    # settings file's folder as ``landing`` is, never from the shell's.
    pdir.add_files(1, 10)
    body = RELATIVE.format(filesystem="").replace('"landing"', '"file:landing"')
    config = pdir.write_config(body)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "landing").mkdir(parents=True)  # the shell's folder has one too: not meant
    done = cli("run", str(config), "--available-now", "--no-progress", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_a_file_uri_naming_a_host_is_refused(pdir: PipelineDir, tmp_path: Path) -> None:
    # ``file://landing/`` names a host "landing" and the path "/": the local disk has no hosts,
    # and reading "/" is not what was meant.
    pdir.add_files(1, 10)
    config = pdir.write_config(
        RELATIVE.format(filesystem="").replace('"landing"', '"file://landing/"')
    )
    done = cli("run", str(config), "--available-now", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "'file://landing/'" in done.stderr and "names the host 'landing'" in done.stderr
    assert not pdir.out.exists()
