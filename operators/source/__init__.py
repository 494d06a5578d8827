"""HDFS2FileSource: read files as lines or binary blocks, resumable at a byte offset.

The package, along its seams: :mod:`.operator` (the operator, its settings and file feeds),
:mod:`.records` (the bytes read ahead of the offset, as lines or blocks), :mod:`.decoding`
(bytes to line records, one rule for both engines), :mod:`.readahead` (the next chunk read on a
thread of its own) and :mod:`.ledger` (what was read of each file, remembered by content, so a
file listed again continues where reading stopped).

Modules inside the operators import the submodules, never this package, so that no import
order can find it half made.
"""

from operators.source.operator import FileNameList, HDFS2FileSource, SourceSettings

__all__ = ["FileNameList", "HDFS2FileSource", "SourceSettings"]
