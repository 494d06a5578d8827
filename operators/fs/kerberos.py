"""Kerberos for ``webhdfs://`` / ``swebhdfs://`` (SPNEGO) and the words of its failures.

A ``keytab`` is used through GSSAPI's credential store: the principal's tickets live in a
memory cache private to this process (never the user's ``KRB5CCNAME``), and MIT Kerberos gets
a new ticket from the keytab by itself before the old one expires, so a long run stays logged
in. Without a keytab, the ticket cache of ``kinit`` (``KRB5CCNAME``) is used; it is the user's to
renew. ``hdfs://`` (hdfs-native) does the same itself with ``kerberos_keytab``.

Every failure becomes one line naming what is wrong and what to do (:func:`explain`): no
ticket, a principal the KDC does not know, a keytab of another principal or with old keys, an
expired ticket, no KDC reachable.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from typing import Any

from .settings import FileSystemSettings

__all__ = ["check_keytab", "explain", "is_kerberos_failure", "spnego_auth"]

logger = logging.getLogger(__name__)
_caches = itertools.count()

#: ``(text in GSSAPI's / the KDC's message, what is wrong, what to do)``, first match wins.
_CAUSES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("not found in Kerberos database", "Client not found"),
        "the KDC does not know the principal {principal}",
        "check kerberos_principal (user@REALM, as klist -kt KEYTAB lists it)",
    ),
    (
        ("No key table entry found", "Keytab contains no suitable keys", "No credentials cache"),
        "the keytab holds no key for {principal}",
        "give the keytab of that principal (klist -kt KEYTAB lists its principals)",
    ),
    (
        ("Preauthentication failed", "Decrypt integrity check failed", "Key version"),
        "the keytab's key for {principal} is not the one the KDC has",
        "export a new keytab for the principal (its password or keys changed)",
    ),
    (
        ("expired",),
        "the Kerberos ticket of {principal} has expired",
        "run kinit again, or set keytab so that the job logs in and renews by itself",
    ),
    (
        ("No Kerberos credentials available", "No credentials were supplied", "GSS_S_NO_CRED"),
        "no Kerberos ticket for {principal}",
        "run kinit {principal_arg}, or set keytab (authKeytab) to log in from a keytab",
    ),
    (
        ("Cannot contact any KDC", "Cannot find KDC", "Cannot resolve network address"),
        "no KDC of the realm answers",
        "check the realm's kdc in krb5.conf (KRB5_CONFIG) and that the KDC runs",
    ),
)
#: The errors of the Kerberos libraries (by name: they are optional), never of the filesystem.
_ERROR_TYPES = frozenset({"SPNEGOExchangeError", "GSSError", "MissingCredentialsError"})


def is_kerberos_failure(err: BaseException) -> bool:
    """Whether ``err`` is GSSAPI's (hdfs-native's ``GSSAPIError``, requests-gssapi's), not a
    filesystem error whose text merely names a path such as ``/keytab``."""
    if type(err).__name__ in _ERROR_TYPES:
        return True
    return isinstance(err, RuntimeError) and str(err).startswith("GSSAPIError(")


def explain(settings: FileSystemSettings, text: str, op: str, where: str) -> PermissionError:
    """One line for a Kerberos failure: what is wrong and what to do (``text`` is scrubbed)."""
    principal = settings.kerberos_principal or "(no kerberos_principal)"
    causes = _CAUSES
    if settings.keytab is not None:
        # With a keytab, "no credentials" means it had none for the principal.
        causes = tuple(c for c in _CAUSES if "GSS_S_NO_CRED" not in c[0])
        causes += ((_CAUSES[4][0], _CAUSES[1][1], _CAUSES[1][2]),)
    for markers, what, todo in causes:
        if any(marker in text for marker in markers):
            arg = settings.kerberos_principal or "USER@REALM"
            msg = f"{op}: {what.format(principal=principal)}: {todo.format(principal_arg=arg)}"
            return PermissionError(errno.EACCES, msg, where)
    first = text.strip().splitlines()[0] if text.strip() else "unknown failure"
    msg = f"{op}: Kerberos login as {principal} failed ({first}): check the principal and keytab"
    return PermissionError(errno.EACCES, msg, where)


def check_keytab(settings: FileSystemSettings) -> None:
    """``PermissionError`` when the keytab cannot be read (its path is a secret: not named)."""
    if settings.keytab is None:
        return
    try:
        with open(settings.keytab.get_secret_value(), "rb"):
            pass
    except OSError as err:
        why = err.strerror or type(err).__name__
        msg = f"LOGIN: the keytab cannot be read ({why}): check the keytab setting"
        raise PermissionError(errno.EACCES, msg, settings.display("/")) from None


def spnego_auth(settings: FileSystemSettings) -> Any:
    """A requests ``auth`` that logs in as ``kerberos_principal`` by SPNEGO (``ImportError``
    naming the extra when requests-gssapi is missing)."""
    try:
        import gssapi
        from gssapi.raw.misc import GSSError
        from requests_gssapi import DISABLED, HTTPSPNEGOAuth
    except ImportError:
        msg = (
            f"{settings.display()}: kerberos_principal is set but requests-gssapi is not "
            "installed (pip install 'hdfs-region[kerberos]')"
        )
        raise ImportError(msg) from None
    assert settings.kerberos_principal is not None
    check_keytab(settings)
    name = gssapi.Name(settings.kerberos_principal, gssapi.NameType.kerberos_principal)
    store: dict[bytes | str, bytes | str] | None = None
    if settings.keytab is not None:
        # A memory cache per client: the user's own ticket cache is neither read nor changed,
        # and a ticket got from one keytab never stands in for another keytab's.
        store = {
            "client_keytab": settings.keytab.get_secret_value(),
            "ccache": f"MEMORY:hdfs-region-{os.getpid()}-{next(_caches)}",
        }

    def acquire() -> Any:
        try:
            creds = gssapi.Credentials(name=name, usage="initiate", store=store)
            # A cached ticket that has expired is still "acquired": ask for its time left (from
            # a keytab, acquiring gets a fresh one when it is due).
            left = creds.lifetime
        except GSSError as err:
            raise explain(settings, str(err), "LOGIN", settings.display("/")) from None
        if left == 0:
            raise explain(settings, "ticket expired", "LOGIN", settings.display("/"))
        return creds

    class _FreshSPNEGOAuth(HTTPSPNEGOAuth):  # type: ignore[misc]
        """Acquires the credentials again before each SPNEGO exchange: a held credential
        keeps its first ticket past its end ("Ticket expired"); acquiring again from the
        keytab renews it (MIT's client keytab), from a ticket cache it sees a kinit's."""

        def generate_request_header(self, *args: Any, **kwargs: Any) -> Any:
            self.creds = acquire()
            return super().generate_request_header(*args, **kwargs)

    # No mutual authentication: Hadoop answers an error (404, 403) without a SPNEGO token, and
    # requests-gssapi would then log an ERROR for every missing file. On swebhdfs:// TLS
    # proves the server; on webhdfs:// nothing does (as with Hadoop's own client over HTTP).
    return _FreshSPNEGOAuth(creds=acquire(), mutual_authentication=DISABLED)
