"""HDFS2FileSource: read files as lines or binary blocks, resumable at a byte offset.

The package, along its seams: :mod:`.operator` (the operator, its settings and file feeds),
:mod:`.records` (the bytes read ahead of the offset, as lines or blocks), :mod:`.decoding`
(bytes to line records, one rule for both engines), :mod:`.readahead` (the next chunk read on a
thread of its own) and :mod:`.ledger` (what was read of each file, remembered by content, so a
file listed again continues where reading stopped).

Modules inside the operators import the submodules, never this package, so that no import
order can find it half made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.common.lazy import lazy_exports

if TYPE_CHECKING:
    from operators.source.operator import FileNameList, HDFS2FileSource, SourceSettings

__all__ = ["FileNameList", "HDFS2FileSource", "SourceSettings"]

#: Where each public name lives, imported when first used (lazy_exports).
_LAZY = {
    "FileNameList": "operators.source.operator",
    "HDFS2FileSource": "operators.source.operator",
    "SourceSettings": "operators.source.operator",
}
__getattr__ = lazy_exports(__name__, _LAZY)
