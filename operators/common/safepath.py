"""Which file names from data, templates and control inputs are accepted, and confinement to a base.

Names are checked, never rewritten. A name is refused when

- it is empty, absolute, ends with ``/`` or has an empty component (``a//b``);
- a component is ``.`` or ``..`` or starts with ``.`` (hidden names are reserved for in-progress
  files; :func:`name_problem` only);
- a component starts with ``_``, for names from data (``visible=True``: records naming their
  file): plain directory readers (Spark, Hive, ``hdfs dfs -text``) skip such names as they skip
  hidden ones, so the records would be published for nobody, and ``_hdfs_sink`` is the sink's
  own folder (its manifests and owner record), which a record must never write into;
- it contains a control or invisible format character (Unicode categories Cc, Cf, Cs, Zl, Zp:
  NUL, newlines, right-to-left overrides, zero-width spaces), a backslash or a character drawn
  as a slash (U+2215 DIVISION SLASH, U+2044 FRACTION SLASH, ...): a reader or a copy to another
  system may take it for a separator, and a person reading a listing certainly will;
- it changes under Unicode NFKC normalisation (U+FF0E FULLWIDTH FULL STOP, U+2024 ONE DOT LEADER
  and U+FF0F FULLWIDTH SOLIDUS become ``.`` and ``/``). HDFS and Linux store names as given, so
  such a name is no traversal here, but any tool that normalises turns it into one, and
  normalising it ourselves would merge distinct names and write where the data did not say;
- a component is longer than 255 bytes in UTF-8 (the Linux and HDFS default limit), or the
  whole path longer than 4095 bytes.
"""

from __future__ import annotations

import posixpath
import unicodedata

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "confine",
    "name_problem",
    "numbered_name",
    "path_problem",
]

#: Longest file name component (NAME_MAX on Linux, dfs.namenode.fs-limits.max-component-length).
MAX_COMPONENT_BYTES = 255
#: Longest path (PATH_MAX on Linux, less the terminating NUL).
MAX_PATH_BYTES = 4095

_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Characters a reader takes for a separator: backslash and the NFKC-stable look-alikes.
_SLASHES = frozenset("\\\u2044\u2215\u2216\u2571\u2572\u29f5\u29f8\u29f9\u0337\u0338")


def _character_problem(text: str) -> str | None:
    for position, char in enumerate(text):
        if char in _SLASHES:
            return f"contains {_describe(char)} at position {position} (looks like a separator)"
        if unicodedata.category(char) in _BAD_CATEGORIES:
            kind = "a control character" if ord(char) < 0x100 else "an invisible character"
            return f"contains {kind} {_describe(char)} at position {position}"
    if unicodedata.normalize("NFKC", text) != text:
        changed = next((c for c in text if unicodedata.normalize("NFKC", c) != c), text[:1] or "?")
        becomes = unicodedata.normalize("NFKC", changed)
        return (
            f"is not in Unicode NFKC form ({_describe(changed)} reads as {becomes!r}): "
            "write the plain character"
        )
    return None


def _describe(char: str) -> str:
    name = unicodedata.name(char, "")
    code = f"U+{ord(char):04X}"
    return f"{code} {name}" if name else code


def path_problem(path: object, *, reserve: int = 0) -> str | None:
    """Why ``path`` (absolute or relative) is not acceptable as a path at all, or ``None``.

    Checks characters, normalisation and lengths only; ``reserve`` bytes of the last
    component are kept free (for the ``.<name>~<sink>.inprogress`` side names).
    """
    if not isinstance(path, str):
        return f"is a {type(path).__name__}, not a string"
    if not path:
        return "is empty"
    problem = _character_problem(path)
    if problem is not None:
        return problem
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate the category check did not see
        return "is not valid Unicode"
    if len(encoded) > MAX_PATH_BYTES - reserve:
        return f"is {len(encoded)} bytes long, more than {MAX_PATH_BYTES - reserve}"
    parts = path.split("/")
    for i, part in enumerate(parts):
        limit = MAX_COMPONENT_BYTES - (reserve if i == len(parts) - 1 else 0)
        size = len(part.encode("utf-8"))
        if size > limit:
            return f"has a component of {size} bytes ({part[:20]!r}...), more than {limit}"
    return None


def name_problem(name: object, *, reserve: int = 0, visible: bool = False) -> str | None:
    """Why ``name`` is not acceptable as a relative file name below a base, or ``None``.
    ``visible``: the name must also be one plain readers see (no component starting with
    ``_``); the rule for file names from records, on both engines."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    problem = path_problem(name, reserve=reserve)
    if problem is not None:
        return problem
    if name.startswith("/"):
        return "is absolute"
    if name.endswith("/"):
        return "names a directory"
    parts = name.split("/")
    if "" in parts:
        return "has an empty component ('//')"
    if any(part in (".", "..") for part in parts):
        return "has a '.' or '..' component"
    if any(part.startswith(".") for part in parts):
        return "has a component starting with '.' (a hidden name)"
    if visible and any(part.startswith("_") for part in parts):
        return (
            "has a component starting with '_' (plain readers skip such names, and _hdfs_sink "
            "is the sink's own folder)"
        )
    return None


def confine(base: str, name: object, *, reserve: int = 0, visible: bool = False) -> str:
    """``base/name``, normalised, after checking ``name`` (:func:`name_problem`) and that the
    result lies below ``base``. Raises ``ValueError`` saying what is wrong with the name."""
    problem = name_problem(name, reserve=reserve, visible=visible)
    if problem is None:
        assert isinstance(name, str)
        root = posixpath.normpath(base or ".")
        path = posixpath.normpath(posixpath.join(root, name))
        if root == ".":
            inside = path != ".." and not path.startswith(("../", "/"))
        else:
            inside = path.startswith(root.rstrip("/") + "/")
        if inside:
            return path
        problem = "resolves outside the base directory"
    raise ValueError(problem)


def numbered_name(path: str, number: int, *, reserve: int = 0) -> str:
    """``path`` with ``-<number>`` before its extension (``a/orders.csv`` -> ``a/orders-1.csv``;
    only the last extension: ``x.tar.gz`` -> ``x.tar-1.gz``), the stem shortened when the name
    would pass the component limit (less ``reserve`` bytes). The one rule for a returning
    file name, on both engines."""
    head, base = posixpath.split(path)
    stem, ext = posixpath.splitext(base)
    tag = f"-{number}"
    room = MAX_COMPONENT_BYTES - reserve - len((tag + ext).encode())
    if room < 1:  # an extension too long to keep
        stem, ext = base, ""
        room = MAX_COMPONENT_BYTES - reserve - len(tag)
    raw = stem.encode()
    if len(raw) > room:
        stem = raw[:room].decode("utf-8", "ignore")
    return posixpath.join(head, stem + tag + ext)
