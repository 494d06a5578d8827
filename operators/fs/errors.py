"""Errors of the filesystem backends beyond Python's built-ins, and message hygiene."""

from __future__ import annotations

import re

__all__ = ["UnsupportedOperationError", "scrub"]


class UnsupportedOperationError(OSError, NotImplementedError):
    """The backend cannot do this operation at all (e.g. truncate through libhdfs).

    An ``OSError`` (errno ``EOPNOTSUPP``) so callers handling filesystem errors see it, and a
    ``NotImplementedError`` so it reads as what it is.
    """


_QUERY = re.compile(r"\?[^\s'\"()<>]*")
_USERINFO = re.compile(r"(//)[^/\s@'\"]*@")


def scrub(text: str) -> str:
    """``text`` without URL query strings (tokens travel there) or ``user:pass@`` parts."""
    return _USERINFO.sub(r"\1", _QUERY.sub("?…", text))
