"""Errors of the filesystem backends beyond Python's built-ins, and message hygiene."""

from __future__ import annotations

import copy as _copy
import logging
import re
import threading

__all__ = [
    "SecretScrubFilter",
    "TokenRefusedError",
    "UnsupportedOperationError",
    "install_log_scrubbing",
    "register_secret",
    "scrub",
    "scrub_secrets",
]


class TokenRefusedError(PermissionError):
    """The cluster refused a delegation token (expired, cancelled, or of another cluster).

    A ``PermissionError``: a process that was given the token cannot repair it, so the local
    engine stops at once. A Spark task's error reaches the driver by its name only, which is
    neither a built-in nor a region error, so the driver's restart rule runs the batch again;
    a driver holding the Kerberos login gets a new token before it does
    (:meth:`operators.fs.tokens.DelegationToken.refresh`).
    """


class UnsupportedOperationError(OSError, NotImplementedError):
    """The backend cannot do this operation at all (e.g. truncate through libhdfs).

    An ``OSError`` (errno ``EOPNOTSUPP``) so callers handling filesystem errors see it, and a
    ``NotImplementedError`` so it reads as what it is.
    """


_QUERY = re.compile(r"\?[^\s'\"()<>]*")
_USERINFO = re.compile(r"(//)[^/\s@'\"]*@")
# Query parameters that carry credentials (WebHDFS ``delegation``, signed URLs, ...).
_SECRET_PARAM = re.compile(
    r"([?&;](?:delegation|[\w.-]*(?:token|password|passwd|secret|signature|credential|key)"
    r"[\w.-]*)=)[^&;\s'\"#<>]*",
    re.IGNORECASE,
)
#: Shorter values are not masked: they would mangle ordinary words.
_MIN_SECRET = 4
_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` (a password, token or keytab path in use) wherever :func:`scrub` or
    :func:`scrub_secrets` clean a text, also outside URLs."""
    if value and len(value) >= _MIN_SECRET:
        with _secrets_lock:
            _secrets.add(value)


def _mask_known(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    return text


def scrub(text: str) -> str:
    """``text`` without URL query strings (tokens travel there), ``user:pass@`` parts and
    registered secrets (for exception messages: nothing of a URL's query is kept)."""
    return _mask_known(_USERINFO.sub(r"\1", _QUERY.sub("?…", text)))


def scrub_secrets(text: str) -> str:
    """``text`` with the values of credential query parameters (``delegation=``, ``*token*=``,
    ``*password*=``, ...), ``user:pass@`` parts and registered secrets masked; the rest of a
    URL stays readable (for debug logs, where ``op=`` matters)."""
    return _mask_known(_USERINFO.sub(r"\1", _SECRET_PARAM.sub(r"\1***", text)))


class SecretScrubFilter(logging.Filter):
    """Masks credentials in log records (message, arguments, exception and stack text).

    urllib3 logs every request line at DEBUG, with the query string that carries the WebHDFS
    ``delegation`` token; redirects and retries log whole URLs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record: let logging report it as usual
            return True
        clean = scrub_secrets(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_secrets(record.exc_text)
        if record.exc_info and record.exc_info[1] is not None:
            # Formatters that render the exception themselves (pyspark's JSON formatter reads
            # exc_info, not exc_text) get a copy whose messages are masked too.
            etype, value, tb = record.exc_info
            record.exc_info = (etype, _scrubbed_exception(value), tb)
        if record.stack_info:
            record.stack_info = scrub_secrets(record.stack_info)
        return True


def _scrubbed_exception(exc: BaseException, depth: int = 0) -> BaseException:
    """``exc`` (or a copy of it, and of its cause and context) with masked messages; the
    exception the program holds is never changed."""
    cause, context = exc.__cause__, exc.__context__
    clean_cause = (
        _scrubbed_exception(cause, depth + 1) if cause is not None and depth < 8 else cause
    )
    clean_context = (
        _scrubbed_exception(context, depth + 1) if context is not None and depth < 8 else context
    )
    text = str(exc)
    clean = scrub_secrets(text)
    if clean == text and clean_cause is cause and clean_context is context:
        return exc
    try:
        copy = _copy.copy(exc)
        if clean != text:
            copy.args = (clean,)
        copy.__cause__, copy.__context__ = clean_cause, clean_context
        copy.__suppress_context__ = exc.__suppress_context__
        if scrub_secrets(str(copy)) != str(copy):  # its message is not its args (OSError)
            raise ValueError("still shows a secret")
    except Exception:  # not copied clean: a plain exception saying the same, masked
        copy = Exception(f"{type(exc).__name__}: {clean}")
        copy.__cause__, copy.__context__ = clean_cause, clean_context
    return copy


_FILTER = SecretScrubFilter()
#: Loggers of the HTTP and HDFS client libraries (and every child logger that exists).
_CLIENT_LOGGERS = (
    "urllib3",
    "requests",
    "hdfs",
    "requests_gssapi",
    "requests_kerberos",
    "krbcontext",
)


def install_log_scrubbing() -> None:
    """Attach :class:`SecretScrubFilter` to the client libraries' loggers (idempotent).

    A logger's filters only see records logged through that logger, not those of its children,
    so it goes on every existing ``urllib3.*`` / ``requests.*`` / ``hdfs.*`` logger.
    """
    names = set(_CLIENT_LOGGERS)
    names.update(
        name
        for name in list(logging.root.manager.loggerDict)
        if name.split(".", 1)[0] in _CLIENT_LOGGERS
    )
    for name in names:
        target = logging.getLogger(name)
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
