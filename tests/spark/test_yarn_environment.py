"""The Python environment packed for YARN's containers (``operators.spark.yarn``): complete
whatever way the driver's distributions were installed, and refused, naming what is missing,
before any container starts when it is not."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from importlib.metadata import Distribution, distribution, distributions, version
from pathlib import Path

import pytest

from operators.spark import yarn

SETUP_PY = """\
from setuptools import setup
setup(name="legacy-pkg", version="1.2.3", packages=["legacy_pkg"], install_requires=[])
"""


def _legacy_install(tmp_path: Path) -> Path:
    """A real ``setup.py install`` as pip before 23.1 runs it for an sdist without a
    pyproject.toml when the ``wheel`` package is missing (Debian's ``python3 -m venv`` gives pip
    23.0.1 and no wheel: pyspark, hdfs and docopt install this way): setuptools installs the
    package and an ``.egg-info`` beside it and writes a record, and pip writes that record,
    relative to the ``.egg-info``, as its ``installed-files.txt``. The site directory."""
    src, site = tmp_path / "src", tmp_path / "site"
    (src / "legacy_pkg").mkdir(parents=True)
    (src / "legacy_pkg" / "__init__.py").write_text("VALUE = 7\n")
    (src / "legacy_pkg" / "core.py").write_text("def f():\n    return 1\n")
    (src / "setup.py").write_text(SETUP_PY)
    record = tmp_path / "record.txt"
    subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "install",
            "--single-version-externally-managed",
            f"--record={record}",
            "--compile",
            f"--install-lib={site}",
            f"--install-scripts={tmp_path / 'bin'}",
            f"--install-data={tmp_path / 'data'}",
        ],
        cwd=src,
        check=True,
        capture_output=True,
    )
    # pip's step (operations/install/legacy.py): the record's paths relative to the .egg-info.
    installed = [Path(line) for line in record.read_text().splitlines()]
    egg_info = next(p.parent for p in installed if p.parent.name.endswith(".egg-info"))
    (egg_info / "installed-files.txt").write_text(
        "\n".join(sorted(os.path.relpath(p, egg_info) for p in installed if p.is_file())) + "\n"
    )
    return egg_info.parent


def test_a_legacy_setup_py_install_is_packed_with_its_metadata(
    tmp_path: Path,
) -> None:
    """Python 3.11 lists such a distribution's files from SOURCES.txt, which names its metadata
    as in the source tree (``legacy_pkg.egg-info/PKG-INFO``) and no byte code: packed from that
    list, the containers found pyspark's modules but not its metadata, and the executors'
    release probe failed with ``No package metadata was found for pyspark``."""
    site = _legacy_install(tmp_path)
    (dist,) = distributions(path=[str(site)])
    files = dict(yarn._dist_files(dist))
    metas = [name for name in files if name.endswith(".egg-info/PKG-INFO")]
    assert len(metas) == 1 and metas[0].startswith("legacy_pkg-1.2.3")
    assert {"legacy_pkg/__init__.py", "legacy_pkg/core.py"} <= files.keys()
    assert not [name for name in files if name.startswith("..") or name.startswith("/")]
    # What the containers unpack: the metadata is found there, under the distribution's name.
    packed = tmp_path / "packed"
    for name, path in files.items():
        (packed / name).parent.mkdir(parents=True, exist_ok=True)
        (packed / name).write_bytes(path.read_bytes())
    (found,) = distributions(path=[str(packed)])
    assert (found.metadata["Name"], found.version) == ("legacy-pkg", "1.2.3")


def test_a_wheel_install_is_packed_with_its_record_files() -> None:
    """pyarrow is installed from a wheel: its dist-info and modules, its RECORD left out."""
    from importlib.metadata import distribution

    dist: Distribution = distribution("pyarrow")
    names = {name for name, _ in yarn._dist_files(dist)}
    assert "pyarrow/__init__.py" in names
    assert any(n.endswith(".dist-info/METADATA") for n in names)
    assert not any(n.endswith(".dist-info/RECORD") for n in names)


def _bare_archive(path: Path) -> Path:
    """An environment with an interpreter and nothing installed."""
    with tarfile.open(path, "w:gz") as tar:
        data = f"home = {os.path.dirname(yarn._base_python())}\n".encode()
        info = tarfile.TarInfo("pyvenv.cfg")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, yarn._base_python()
        tar.addfile(link)
    return path


def test_an_environment_its_python_cannot_use_is_refused_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    with pytest.raises(RuntimeError) as caught:
        yarn._check_packed(_bare_archive(tmp_path / "env.tar.gz"), [])
    message = str(caught.value)
    assert "lacks the metadata of hdfs-region" in message
    assert "the module pyspark.worker (ModuleNotFoundError" in message
    assert "the module operators.spark.executors" in message


def test_packing_keeps_no_archive_that_fails_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing that leaves the metadata out (as Python 3.11 lists a legacy install's files):
    refused before the archive is cached, so that the next run packs again."""
    real = yarn._dist_files
    monkeypatch.setattr(
        yarn,
        "_dist_files",
        lambda dist: ((n, p) for n, p in real(dist) if "-info/" not in n or "pyspark" not in n),
    )
    with pytest.raises(RuntimeError, match=r"lacks the metadata of pyspark: reinstall"):
        yarn.pack_environment(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_packed_environment_imports_the_drivers_releases(tmp_path: Path) -> None:
    """The archive YARN unpacks, run as a container runs it (``environment/bin/python``, no
    PYTHONPATH): it finds the driver's releases of pyspark and this project, and imports
    pyspark's worker and the project from its own site-packages, not from this checkout."""
    archive = yarn.pack_environment(tmp_path / "cache")
    work = tmp_path / "container"
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(work)  # our own archive
    probe = (
        "import importlib.metadata as m, json, operators, pyspark.worker; "
        "print(json.dumps([m.version('pyspark'), m.version('hdfs-region'), "
        "m.version('hdfs'), operators.__file__]))"
    )
    done = subprocess.run(
        [str(work / "bin" / "python"), "-I", "-c", probe],
        cwd=work,
        env={"PATH": os.defpath},
        capture_output=True,
        text=True,
        check=True,
    )
    pyspark, own, hdfs, where = json.loads(done.stdout)
    assert (pyspark, own, hdfs) == (version("pyspark"), version("hdfs-region"), version("hdfs"))
    assert Path(where).is_relative_to(work)


#: Run in a separate interpreter on an installed layout: packs with the requirements' files left
#: out (the test above packs those) and prints where ``operators`` was imported from and the
#: archive's names.
_PACK_INSTALLED = """\
import json, sys, tarfile
from pathlib import Path
from operators.spark import yarn
yarn._dist_files = lambda dist: iter(())
yarn._check_packed = lambda archive, dists: None
archive = yarn.pack_environment(Path(sys.argv[1]))
import operators
with tarfile.open(archive, "r:gz") as tar:
    print(json.dumps([operators.__file__, tar.getnames()]))
"""


def test_a_wheel_install_is_packed_from_where_it_is_installed(tmp_path: Path) -> None:
    """Installed from the wheel, the packages sit in a site directory with the distribution's
    metadata and no ``pyproject.toml`` beside them (no checkout). The archive takes every file
    of the packages from there, the sandbox's Java sources included."""
    site = tmp_path / "site-packages"
    for package in ("region", "operators"):
        shutil.copytree(
            Path(sys.modules[package].__file__ or "").parent,
            site / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    # A file only this layout has: the archive holds the installed files, not the checkout's.
    (site / "operators" / "installed-only.txt").write_text("installed\n")
    own = version("hdfs-region")
    info = site / f"hdfs_region-{own}.dist-info"
    info.mkdir()
    requires = "".join(f"Requires-Dist: {r}\n" for r in distribution("hdfs-region").requires or ())
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: hdfs-region\nVersion: {own}\n{requires}"
    )
    done = subprocess.run(
        [sys.executable, "-c", _PACK_INSTALLED, str(tmp_path / "cache")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    where, names = json.loads(done.stdout)
    assert Path(where).is_relative_to(site)
    packed = {
        n.removeprefix(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/")
        for n in names
    }
    installed = {
        path.relative_to(site).as_posix()
        for package in ("region", "operators")
        for path in (site / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert installed - packed == set()
    assert {
        "operators/installed-only.txt",
        "operators/sandbox/java/pom.xml",
        "operators/sandbox/java/src/main/java/hdfsregion/Sandbox.java",
        "operators/spark/executors.py",
        f"hdfs_region-{own}.dist-info/METADATA",
    } <= packed
