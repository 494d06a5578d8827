"""The CA certificates trusted for ``swebhdfs://`` / ``https://`` (``ca_bundle``, IBM's
``keyStorePath``).

A PEM file is handed to the HTTP client as it is. A PKCS12 store is opened with the
``cryptography`` package (optional: ``pip install 'hdfs-region[tls]'``) and its certificates
written once per process to a private PEM file. A Java KeyStore (JKS, JCEKS), IBM's own format,
cannot be read from Python: it is refused with the ``keytool`` line that exports it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
import threading
from typing import Literal

__all__ = ["check_trust_store", "trust_store_kind", "verify_path"]

StoreKind = Literal["pem", "pkcs12"]

_JKS_MAGIC = {b"\xfe\xed\xfe\xed": "a Java KeyStore (JKS)", b"\xce\xce\xce\xce": "a JCEKS store"}
_PEM_CERT = b"-----BEGIN CERTIFICATE-----"
#: ``(path, mtime_ns, size)`` -> the PEM file made from a PKCS12 store.
_converted: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ValueError(f"ca_bundle: {path!r} cannot be read ({err.strerror or err})") from None


def trust_store_kind(path: str, data: bytes | None = None) -> StoreKind:
    """``"pem"`` or ``"pkcs12"``; ``ValueError`` naming the file for anything else."""
    data = _read(path) if data is None else data
    if _PEM_CERT in data:
        return "pem"
    magic = _JKS_MAGIC.get(data[:4])
    if magic is not None:
        raise ValueError(
            f"ca_bundle: {path!r} is {magic}, which cannot be read here: export the CA "
            f"certificate as PEM (keytool -exportcert -rfc -keystore {path} -alias ALIAS "
            "-file ca.pem) and give that file"
        )
    if data[:1] == b"\x30":  # a DER SEQUENCE: PKCS12 is the store that is one
        return "pkcs12"
    raise ValueError(f"ca_bundle: {path!r} holds no PEM certificate and is not a PKCS12 store")


def _pkcs12_pem(path: str, data: bytes, password: str | None) -> bytes:
    try:
        from cryptography.hazmat.primitives.serialization import Encoding, pkcs12
    except ImportError:
        raise ValueError(
            f"ca_bundle: {path!r} is a PKCS12 store, which needs the cryptography package "
            f"(pip install 'hdfs-region[tls]'), or convert it: openssl pkcs12 -in {path} "
            "-nokeys -out ca.pem"
        ) from None
    secret = password.encode() if password else None
    try:
        _key, cert, extra = pkcs12.load_key_and_certificates(data, secret)
    except ValueError:
        # Never the password itself.
        why = "key_store_password does not open it" if password else "key_store_password is needed"
        raise ValueError(f"ca_bundle: {path!r} is not a readable PKCS12 store ({why})") from None
    certs = ([cert] if cert is not None else []) + list(extra)
    if not certs:
        raise ValueError(f"ca_bundle: {path!r} is a PKCS12 store without certificates")
    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def check_trust_store(path: str, password: str | None = None) -> None:
    """Refuse, naming the file, a ``ca_bundle`` that cannot be used (at configuration time)."""
    data = _read(path)
    if trust_store_kind(path, data) == "pkcs12":
        _pkcs12_pem(path, data, password)


def verify_path(path: str, password: str | None = None) -> str:
    """A PEM file of the certificates in ``path``, for the HTTP client's ``verify``."""
    data = _read(path)
    if trust_store_kind(path, data) == "pem":
        return path
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    with _lock:
        made = _converted.get(key)
        if made is None:
            pem = _pkcs12_pem(path, data, password)
            fd, made = tempfile.mkstemp(prefix="hdfs-region-ca-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            atexit.register(_remove, made)
            _converted[key] = made
    return made


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
