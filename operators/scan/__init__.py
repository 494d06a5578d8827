"""HDFS2DirectoryScan: emit each new file of a directory once, in the strict order (mtime_ns, name).

The package, along its seams: :mod:`.operator` (the operator and its settings), :mod:`.cursor`
(which files of a listing are new, one rule for both engines), :mod:`.census` (a fixed-size
summary of the names already seen), :mod:`.listing` (which files are ready, in order),
:mod:`.control` (the control input: list again, switch directory) and :mod:`.housekeeping`
(``after_read``: keep, archive or delete a file once everything read from it is published).

Modules inside the operators import the submodules, never this package, so that no import
order can find it half made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.common.lazy import lazy_exports

if TYPE_CHECKING:
    from operators.scan.operator import HDFS2DirectoryScan, ScanSettings

__all__ = ["HDFS2DirectoryScan", "ScanSettings"]

#: Where each public name lives, imported when first used (lazy_exports).
_LAZY = {
    "HDFS2DirectoryScan": "operators.scan.operator",
    "ScanSettings": "operators.scan.operator",
}
__getattr__ = lazy_exports(__name__, _LAZY)
