"""What a job on YARN needs: a packed Python environment for its containers.

YARN's containers start on NodeManagers that have none of the driver's Python packages. PySpark's
documented way to give them an environment is an archive of a virtual environment in
``spark.archives`` (``venv-pack``), unpacked by YARN into each container's working directory,
whose ``bin/python`` runs the Python workers (``spark.pyspark.python``). :func:`pack_environment`
builds that archive from the driver's own installation, so that the containers import the same
releases as the driver:

1. The closure of this project's requirements (``importlib.metadata``: extras left out) is
   collected from the installed distributions, each with its metadata directory and the files
   its ``RECORD`` names (a wheel's install) or its ``installed-files.txt`` (a legacy
   ``setup.py install``, which pip before 23.1 makes of an sdist such as pyspark's when the
   ``wheel`` package is missing: Debian's ``python3 -m venv``), byte code included (a worker
   compiles nothing), without pyspark's jars (about 460 MB: the JVM side reaches the
   containers through ``spark.yarn.jars`` / ``spark.yarn.archive``).
2. The project itself is copied from its packages (``region``, ``operators``), whatever the way
   it is installed (an editable install holds only a path to this tree), with a minimal
   ``dist-info`` so that the executors report its version.
3. A ``pyvenv.cfg`` and ``bin/python``, a symbolic link to the driver's base interpreter, as
   ``venv`` (and ``venv-pack``) make them: the NodeManagers must have the same Python at the same
   path.
4. Checked before it is kept: the packed interpreter, run on the archive unpacked aside, must
   find every distribution's metadata and import the modules the containers run; what it
   cannot is named in a ``RuntimeError`` before any container starts.
5. Written as ``.tar.gz`` to a temporary name and renamed, under
   ``$XDG_CACHE_HOME/hdfs-region/yarn-env/`` named by a digest of the releases and the project's
   files: a later run with the same code packs nothing.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import posixpath
import re
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from region.fs import FileSystem

__all__ = [
    "ENV_NAME",
    "is_yarn_master",
    "pack_environment",
    "pyspark_archives",
    "stage_archive",
    "yarn_conf",
]

logger = logging.getLogger(__name__)

_PROJECT = "hdfs-region"
_PACKAGES = ("region", "operators")
#: The archive's directory name in each container (``spark.archives`` ``…#environment``).
ENV_NAME = "environment"
#: Files of an installed distribution that no container needs.
_LEFT_OUT = re.compile(r"^pyspark/(jars|examples|data|licenses|sbin)/|^\.\./|\.dist-info/RECORD$")


def is_yarn_master(master: str | None) -> bool:
    return master == "yarn"


def _requirement_names(dist: Distribution) -> Iterator[str]:
    """Names of what ``dist`` requires outside extras (markers evaluated when ``packaging`` is
    there, else every requirement whose marker is not an extra's)."""
    for text in dist.requires or ():
        name_match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        if name_match is None:
            continue
        marker = text.partition(";")[2].strip()
        if marker:
            if "extra" in marker:
                continue
            try:
                from packaging.markers import Marker

                if not Marker(marker).evaluate():
                    continue
            except ImportError:
                pass
        yield name_match.group(1)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _source_requirements(project: Path) -> list[str] | None:
    """The requirement names of the ``pyproject.toml`` beside this project's packages (a
    source tree, e.g. an editable install), or ``None`` when there is none or not ours."""
    path = project / "pyproject.toml"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return None
    if _normal(str(table.get("name", ""))) != _PROJECT:
        return None
    names = (re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", str(t)) for t in table["dependencies"])
    return [_normal(m.group(1)) for m in names if m is not None]


def _check_installed_metadata(own: Distribution, source: Path) -> None:
    """Refuse to pack from installed metadata older than the source tree's requirements: an
    editable install keeps the requirements of the day it was made, and a requirement added
    since would be left out of the containers, which would then fail to import it in the
    middle of the first batch."""
    wanted = _source_requirements(source)
    if wanted is None:
        return
    installed = {_normal(name) for name in _requirement_names(own)}
    missing = sorted(set(wanted) - installed)
    if missing:
        msg = (
            f"the YARN environment: {source / 'pyproject.toml'} requires {', '.join(missing)}, "
            f"which the installed metadata of {_PROJECT} {own.version} does not name (an "
            f"install older than the source): run `pip install -e {source}` again"
        )
        raise RuntimeError(msg)


def _closure() -> list[Distribution]:
    """The installed distributions this project needs, this project excluded."""
    seen: dict[str, Distribution] = {}
    own = distribution(_PROJECT)
    source = Path(sys.modules[_PACKAGES[0]].__file__ or "").parent.parent
    _check_installed_metadata(own, source)
    todo = list(_requirement_names(own))
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            msg = f"the YARN environment: {name!r}, a requirement of {_PROJECT}, is not installed"
            raise RuntimeError(msg) from None
        seen[name] = dist
        todo.extend(_requirement_names(dist))
    return [seen[name] for name in sorted(seen)]


def _dist_files(dist: Distribution) -> Iterator[tuple[str, Path]]:
    """Each installed file of ``dist``: its name relative to the site directory, and its path.

    A wheel's install lists its files, metadata included, in ``RECORD``. A legacy ``setup.py
    install`` leaves an ``.egg-info`` directory, for which Python 3.11's ``Distribution.files``
    reads ``SOURCES.txt``: the source tree's names, which name the metadata
    ``pyspark.egg-info/PKG-INFO`` where it is installed as ``pyspark-4.3.0.egg-info/``, and no
    byte code. Its ``installed-files.txt`` (written by pip, relative to the ``.egg-info``) names
    what was installed; and the metadata directory is added whole in any case, so that
    ``importlib.metadata`` finds every distribution in the containers.
    """
    meta = getattr(dist, "_path", None)  # PathDistribution: the .dist-info / .egg-info
    names: dict[str, Path] = {}
    if isinstance(meta, Path) and meta.is_dir():
        for path in sorted(meta.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                names[f"{meta.name}/{path.relative_to(meta).as_posix()}"] = path
    elif isinstance(meta, Path) and meta.is_file():  # a one-file .egg-info (distutils)
        names[meta.name] = meta
    if isinstance(meta, Path) and (meta / "installed-files.txt").is_file():
        for line in (meta / "installed-files.txt").read_text(encoding="utf-8").splitlines():
            relative = posixpath.normpath(posixpath.join(meta.name, line.strip()))
            if line.strip() and not relative.startswith("../"):  # scripts in bin/: not needed
                names.setdefault(relative, meta.parent / relative)
    else:
        for item in dist.files or ():
            names.setdefault(str(item), Path(str(dist.locate_file(item))))
    for relative, path in names.items():
        if _LEFT_OUT.search(relative) or "__editable__" in relative:
            continue
        if path.is_file():
            yield relative, path


def _project_files() -> Iterator[tuple[str, Path]]:
    for package in _PACKAGES:
        root = Path(sys.modules[package].__file__ or "").parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield f"{package}/{path.relative_to(root)}", path


def _digest(dists: list[Distribution], project: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256(sys.version.encode() + _base_python().encode())
    for dist in dists:
        h.update(f"{dist.metadata['Name']}=={dist.version}\n".encode())
    for name, path in project:
        h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def pack_environment(cache: Path | None = None) -> Path:
    """The ``.tar.gz`` of a virtual environment for YARN's containers (see the module
    docstring), built once per set of releases and project files."""
    import operators
    import region

    del operators, region  # imported so that their paths are known
    dists = _closure()
    project = list(_project_files())
    if cache is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache = base / "hdfs-region" / "yarn-env"
    target = cache / f"env-{_digest(dists, project)}.tar.gz"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"lib/{version}/site-packages"
    interpreter = _base_python()
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(temp, "w:gz", compresslevel=1) as tar:
            _add_text(
                tar,
                "pyvenv.cfg",
                f"home = {os.path.dirname(interpreter)}\ninclude-system-site-packages = false\n"
                f"version = {'.'.join(map(str, sys.version_info[:3]))}\n",
            )
            for name in ("python", "python3", version):
                link = tarfile.TarInfo(f"bin/{name}")
                link.type = tarfile.SYMTYPE
                link.linkname = interpreter
                tar.addfile(link)
            for dist in dists:
                for relative, path in _dist_files(dist):
                    tar.add(path, f"{site}/{relative}")
            for relative, path in project:
                tar.add(path, f"{site}/{relative}")
            own = _project_version()
            info = f"{site}/hdfs_region-{own}.dist-info"
            _add_text(
                tar,
                f"{info}/METADATA",
                f"Metadata-Version: 2.1\nName: {_PROJECT}\nVersion: {own}\n",
            )
        _check_packed(temp, dists)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    logger.info(
        "packed the YARN containers' Python environment: %s (%.1f MB, %d distributions, %.1f s)",
        target,
        target.stat().st_size / 1e6,
        len(dists),
        time.monotonic() - started,
    )
    return target


#: What a container runs of its own accord: pyspark's daemon and worker, and the probe of this
#: project's release (operators.spark.executors).
_CONTAINER_MODULES = ("pyspark.daemon", "pyspark.worker", "operators.spark.executors")

#: Run by the packed interpreter: argv[1] is [distribution names, module names]; prints the
#: list of what it cannot find.
_CHECK = """\
import importlib, importlib.metadata as metadata, json, sys
names, modules = json.loads(sys.argv[1])
missing = []
for name in names:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(f"the metadata of {name}")
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as exc:
        missing.append(f"the module {module} ({type(exc).__name__}: {exc})")
print(json.dumps(missing))
"""


def _import_names(dists: list[Distribution]) -> list[str]:
    """The top-level modules of this project's own requirements (``packages_distributions``:
    ``top_level.txt`` or the files), which the containers import through this project."""
    from importlib.metadata import packages_distributions

    wanted = {_normal(name) for name in _requirement_names(distribution(_PROJECT))}
    known = {_normal(d.metadata["Name"]) for d in dists}
    return sorted(
        module
        for module, owners in packages_distributions().items()
        if not module.startswith("_")
        and module.isidentifier()
        and any(_normal(o) in wanted & known for o in owners)
    )


def _check_packed(archive: Path, dists: list[Distribution]) -> None:
    """Unpack ``archive`` aside and run its ``bin/python`` as a container runs it: every
    distribution's metadata must be found (the executors' release probe asks for it) and the
    modules the containers import must import. A ``RuntimeError`` names what is missing, before
    the archive is kept and before any container starts."""
    import json
    import subprocess
    import tempfile

    names = [_PROJECT, *(str(d.metadata["Name"]) for d in dists)]
    modules = [*_CONTAINER_MODULES, *_import_names(dists)]
    with tempfile.TemporaryDirectory(prefix="hdfs-region-env-") as root:
        with tarfile.open(archive, "r:gz") as tar:
            # Our own archive, with bin/python an absolute link to this interpreter.
            trusted: dict[str, str] = (
                {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            )
            tar.extractall(root, **trusted)  # type: ignore[arg-type]
        done = subprocess.run(
            [os.path.join(root, "bin", "python"), "-I", "-c", _CHECK, json.dumps([names, modules])],
            cwd=root,
            env={"PATH": os.environ.get("PATH", os.defpath)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    try:
        missing: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        missing = [f"a working interpreter (exit {done.returncode}: {done.stderr.strip()[-500:]})"]
    if missing:
        msg = (
            f"the YARN containers' Python environment packed from {sys.prefix} lacks "
            f"{'; '.join(missing)}: reinstall what it names (pip install --force-reinstall "
            "NAME), or give the containers an environment of your own (spark.archives and "
            "spark.pyspark.python)"
        )
        raise RuntimeError(msg)


def _base_python() -> str:
    """The interpreter a venv of this Python links to (this one outside a venv)."""
    base: str = getattr(sys, "_base_executable", sys.executable)
    return os.path.realpath(base)


def _project_version() -> str:
    from operators.spark.executors import versions

    return versions()[0]


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    item = tarfile.TarInfo(name)
    item.size = len(data)
    item.mode = 0o644
    tar.addfile(item, io.BytesIO(data))


def stage_archive(fs: FileSystem, directory: str, archive: Path) -> str:
    """``archive`` copied once into ``directory`` of the cluster's filesystem (its name is its
    digest, so a copy there is the same archive): its URI. World-readable under directories any
    user may enter, so that the NodeManagers keep it in their public cache, shared by every
    later application; Spark uploads a local archive again with every application.

    1. Nothing to do when the file is there.
    2. Write it to a hidden temporary name (mode 0644), then rename it into place; another job
       that got there first leaves the same bytes, and this copy is deleted."""
    target = posixpath.join(directory, archive.name)
    if fs.exists(target):
        return fs.display(target)
    fs.mkdirs(directory, permission=0o755)
    temp = posixpath.join(directory, f".{archive.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    writer = fs.create(temp, overwrite=True, permission=0o644)
    try:
        with archive.open("rb") as source:
            while chunk := source.read(1 << 22):
                writer.write(chunk)
    finally:
        writer.close()
    try:
        fs.rename(temp, target)
    except FileExistsError:
        fs.delete(temp)
    logger.info(
        "staged %s at %s (%.1f s)", archive.name, fs.display(target), time.monotonic() - started
    )
    return fs.display(target)


def yarn_conf(
    settings: dict[str, str], stage: Callable[[Path], str] | None = None
) -> dict[str, str]:
    """Settings a ``yarn`` master adds to ``settings`` (which win): the packed environment in
    ``spark.archives`` and its Python for the workers, unless the job gives its own
    (``spark.archives`` or ``spark.pyspark.python``). ``stage``: copies the archive to the
    cluster once and returns its URI (:func:`stage_archive`); without it, Spark uploads the
    local archive with each application."""
    out: dict[str, str] = {}
    if "spark.archives" in settings or "spark.pyspark.python" in settings:
        return out
    archive = pack_environment()
    where = stage(archive) if stage is not None else str(archive)
    out["spark.archives"] = f"{where}#{ENV_NAME}"
    out["spark.pyspark.python"] = f"./{ENV_NAME}/bin/python"
    # The application master of cluster mode runs the driver's Python there too.
    out["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] = f"./{ENV_NAME}/bin/python"
    return out


def pyspark_archives(settings: dict[str, str]) -> None:
    """Point ``PYSPARK_ARCHIVES_PATH`` at the packed environment's pyspark and py4j when the
    containers run that environment and the variable is unset: Spark's YARN client otherwise
    uploads ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip with every application, and
    refuses to start when an installation from a wheel lacks them. ``local:`` names a path in
    each container (its working directory holds the unpacked archive)."""
    if os.environ.get("PYSPARK_ARCHIVES_PATH"):
        return
    if settings.get("spark.pyspark.python") != f"./{ENV_NAME}/bin/python":
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    os.environ["PYSPARK_ARCHIVES_PATH"] = f"local:./{ENV_NAME}/lib/{version}/site-packages"
