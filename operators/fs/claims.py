"""This process's claims on paths open for writing.

A remote filesystem's lease belongs to a client, not to a writer: two writers of one path in the
same process would both pass the server's single-writer check (WebHDFS even holds no lease
between requests). A claim per open writer makes the second one fail here instead.
"""

from __future__ import annotations

import errno
import threading
import weakref

__all__ = ["WriterClaim", "claim_path"]

_claims: weakref.WeakValueDictionary[tuple[str, str], WriterClaim] = weakref.WeakValueDictionary()
_lock = threading.Lock()


class WriterClaim:
    """Held while a writer is open; gone on :meth:`release` or when the writer is dropped."""

    def __init__(self, key: tuple[str, str]) -> None:
        self.key = key

    def release(self) -> None:
        with _lock:
            if _claims.get(self.key) is self:
                del _claims[self.key]


def claim_path(authority: str, path: str, where: str) -> WriterClaim:
    """Claim ``path`` of the filesystem ``authority``; ``BlockingIOError`` naming ``where`` (the
    path as a URI) when another writer of this process holds it."""
    key = (authority, path)
    with _lock:
        if _claims.get(key) is not None:
            msg = "another writer of this process holds the file open (lease held)"
            raise BlockingIOError(errno.EWOULDBLOCK, msg, where)
        claim = _claims[key] = WriterClaim(key)
    return claim
