"""Where a sink's files go and what they are called: the final names (rendered from the file
template, or named by records and confined to the base directory), the hidden side names next
to them, the directories recovery searches, and the output directories it creates.

Side names of a final name ``dir/name``, owned by the sink called ``sink``:

- ``dir/.name~sink.inprogress`` — the file while it is written (``publish="atomic"``);
- ``dir/.name~sink.open`` — an empty marker standing for a visible file no completed cut
  covers yet (``publish="visible"``);
- ``dir/.name~sink.rewrite`` — a prefix being copied where the filesystem cannot truncate;
- ``dir/.name~sink.arrow`` — a Parquet or ORC file while it is written, as an Arrow stream
  (:mod:`operators.sink.formats`).

``~`` cannot occur in sink names, so ``~<sink><suffix>`` identifies the sink exactly.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator
from typing import Any

from operators.common.errors import BadRecordError, short
from operators.common.safepath import confine, name_problem, numbered_name
from operators.sink.owner import SINK_DIR
from operators.sink.settings import SinkSettings
from operators.sink.templating import FileNameTemplate
from region.atomic import dir_permission
from region.errors import ConfigError
from region.fs import FileStatus, FileSystem

__all__ = [
    "INPROGRESS",
    "MARKER",
    "REWRITE",
    "STAGED",
    "SinkLayout",
    "below",
    "final_of",
    "norm",
    "parse_side_name",
    "side_name",
]

INPROGRESS = ".inprogress"
MARKER = ".open"
REWRITE = ".rewrite"
STAGED = ".arrow"
_SUFFIXES = (INPROGRESS, MARKER, REWRITE, STAGED)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class SinkLayout:
    """The names and directories of one sink's files (see the module doc).

    Raises ConfigError when the sink name or the template cannot work: a name with other
    characters than letters, digits, ``_-.``, variables in the template's first directory
    (recovery would have to walk the whole filesystem), or a template whose rendered names
    leave their directory.
    """

    def __init__(
        self,
        settings: SinkSettings,
        fs: FileSystem,
        name: str,
        *,
        now: float,
        partition: int | None,
        peid: str,
        pelaunchnum: int,
    ) -> None:
        if not _NAME.fullmatch(name):
            msg = f"sink name {name!r} must be letters, digits, '_', '-' or '.'"
            raise ConfigError(msg)
        self._fs = fs
        self._name = name
        self._partition = partition
        self._peid = peid
        self._pelaunchnum = pelaunchnum
        self.attr = settings.file_attribute_name
        template = settings.template
        self.template = (
            FileNameTemplate(template, settings.time_format) if template is not None else None
        )
        #: Where recovery looks for this sink's side files: (directory, recursive).
        self.roots: list[tuple[str, bool]] = []
        #: The directory names from records are confined to (attribute mode).
        self.base = ""
        if template is None:
            self.base = norm(settings.directory or ".")
            self.roots.append((self.base, True))
        else:
            head = template.rsplit("/", 1)[0] if "/" in template else "."
            if "%" in head:  # variables in directories: walk from the static part
                assert self.template is not None
                prefix = self.template.static_prefix
                static = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
                if static in ("", "."):
                    msg = (
                        f"sink {name!r}: file template {template!r} has variables in its first "
                        "directory; recovery would have to walk the whole filesystem: start it "
                        "with a fixed directory (or set directory=)"
                    )
                    raise ConfigError(msg)
                self.roots.append((norm(static), True))
            else:  # partitions are directories below it
                self.roots.append((norm(head or "/"), bool(settings.partition_by)))
        #: The directory of the rejects files, which record-named files must stay out of.
        self.rejects_dir: str | None = None
        # Side names add ".", "~<sink name>" and a suffix to a final name: keep room for them.
        self._reserve = 2 + len(name) + max(map(len, _SUFFIXES))
        self._permission = settings.permission
        self._dir_permission = dir_permission(settings.permission)
        self._dirs: set[str] = set()  # output directories known to exist
        if self.template is not None:
            # Variables (%TIME's format, %PEID, %HOST) must not lead a name out of its directory.
            sample = self.render(0, now)
            problem = self.template_problem(sample)
            if problem is not None:
                msg = f"sink {name!r}: file template {template!r} gives {sample!r}, which {problem}"
                raise ConfigError(msg)

    @property
    def root(self) -> str:
        """The first directory of the output (rejects files are placed below it)."""
        return self.roots[0][0]

    @property
    def sink_dir(self) -> str:
        """The sink's own folder in the output, which names the job writing it
        (:mod:`operators.sink.owner`)."""
        return posixpath.join(self.root, SINK_DIR)

    # -- names --------------------------------------------------------------------------------

    def render(self, filenum: int, now: float) -> str:
        assert self.template is not None
        return norm(
            self.template.render(
                filenum=filenum,
                now=now,
                partition=self._partition,
                peid=self._peid,
                pelaunchnum=self._pelaunchnum,
            )
        )

    def template_problem(self, final: str) -> str | None:
        """Why a rendered template path is not acceptable, or ``None``."""
        root = self.root
        if root == ".":
            under = final
        elif below(final, root):
            under = final[len(root.rstrip("/")) + 1 :]
        else:
            return f"is outside {root!r}"
        problem = name_problem(under, reserve=self._reserve)
        return None if problem is None else f"below {root!r} {problem}"

    def resolve(self, name: Any, index: int, in_flight: Iterable[str]) -> str:
        """The path of a file named by record ``index``, confined to the base directory (the
        rules are in :mod:`operators.common.safepath`), out of the rejects directory, and clear of
        ``in_flight`` (files written but not published yet); BadRecordError otherwise."""
        problem: str | None
        try:
            path = confine(self.base, name, reserve=self._reserve, visible=True)
        except ValueError as exc:
            problem = str(exc)
        else:
            reserved = self.rejects_dir
            if reserved is not None and reserved != self.base and below(path, reserved):
                problem = "is inside the directory of the rejects files"
            else:
                problem = self._tree_conflict(path, in_flight)
            if problem is None:
                return path
        msg = (
            f"record {index}: file name {short(name)} in {self.attr!r} {problem}; names must be "
            f"relative paths inside {self._fs.display(self.base)}"
        )
        raise BadRecordError(msg, file=self.base, offset=index, field=self.attr)

    def numbered(self, path: str, number: int) -> str:
        """:func:`numbered_name`, leaving room for this sink's side-file suffixes."""
        return numbered_name(path, number, reserve=self._reserve)

    def _tree_conflict(self, path: str, in_flight: Iterable[str]) -> str | None:
        """Why ``path`` cannot coexist with a file of ``in_flight`` (one would have to be a
        directory of the other), or ``None``."""
        for final in in_flight:
            if below(path, final):
                return f"needs {self._fs.display(final)}, a file being written, as a directory"
            if below(final, path):
                return f"is a directory of {self._fs.display(final)}, a file being written"
        return None

    def side(self, final: str, suffix: str) -> str:
        return side_name(final, self._name, suffix)

    # -- directories --------------------------------------------------------------------------

    def ensure_dir(self, directory: str) -> None:
        """Create a missing output directory with the sink's directory permission (a backend
        creating parents on its own would use its default mode)."""
        if not directory or directory in self._dirs:
            return
        if not self._fs.exists(directory):
            self._fs.mkdirs(directory, permission=self._dir_permission)
        self._dirs.add(directory)

    def side_files(self, extra_dirs: Iterable[str]) -> Iterator[tuple[str, str, str]]:
        """``(suffix, final path, side path)`` of every side file of this sink in the roots
        and in ``extra_dirs`` (not recursive), each directory visited once."""
        roots = list(self.roots) + [(d or ".", False) for d in sorted(extra_dirs)]
        seen: set[str] = set()
        for root, recursive in roots:
            for directory, entries in self._walk(root, recursive, seen):
                for status in entries:
                    found = parse_side_name(status.name, self._name)
                    if found is None:
                        continue
                    suffix, base = found
                    final = norm(posixpath.join(directory, base))
                    yield suffix, final, norm(posixpath.join(directory, status.name))

    def _walk(
        self, root: str, recursive: bool, seen: set[str]
    ) -> list[tuple[str, list[FileStatus]]]:
        out = []
        todo = [root]
        while todo:
            directory = todo.pop()
            if directory in seen:
                continue
            seen.add(directory)
            try:
                entries = self._fs.list_dir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.append((directory, [s for s in entries if not s.is_dir]))
            if recursive:
                todo.extend(norm(posixpath.join(directory, s.name)) for s in entries if s.is_dir)
        return out


def norm(path: str) -> str:
    return posixpath.normpath(path) if path else "."


def below(path: str, directory: str) -> bool:
    """Whether ``path`` lies below ``directory`` (both normalised)."""
    return path.startswith(directory.rstrip("/") + "/")


def side_name(final: str, sink: str, suffix: str) -> str:
    head, base = posixpath.split(final)
    return posixpath.join(head, f".{base}~{sink}{suffix}")


def final_of(side: str, sink: str) -> str:
    head, base = posixpath.split(side)
    found = parse_side_name(base, sink)
    assert found is not None, side
    return posixpath.join(head, found[1])


def parse_side_name(name: str, sink: str) -> tuple[str, str] | None:
    """``(suffix, final base name)`` when ``name`` is a side file of ``sink``."""
    if not name.startswith("."):
        return None
    for suffix in _SUFFIXES:
        tail = f"~{sink}{suffix}"
        if name.endswith(tail) and len(name) > len(tail) + 1:
            return suffix, name[1 : -len(tail)]
    return None
