"""HDFS2FileCopy: single files between the local disk and a filesystem, each copy whole or not
at all and safe to repeat after a crash.

:mod:`.transfer` is the copy itself (a hidden temporary beside the destination, synced, renamed
into place; leftovers of killed copies removed; a destination already holding the source's
content counts as done), :mod:`.identity` whether two names reach one file, :mod:`.settings`
the operator's parameters with IBM's names, and :mod:`.operator` the operator: per input record
or for a fixed pair, IBM's result tuple ``(result, elapsed_time)`` and the ``nCopiedFiles``
count.
"""

from operators.copy.operator import CopyResult, HDFS2FileCopy, result_message
from operators.copy.settings import CopyDirection, CopySettings
from operators.copy.transfer import Copied, SameFileError, SourceGoneError, copy_file

__all__ = [
    "Copied",
    "CopyDirection",
    "CopyResult",
    "CopySettings",
    "HDFS2FileCopy",
    "SameFileError",
    "SourceGoneError",
    "copy_file",
    "result_message",
]
