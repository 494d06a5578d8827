"""HDFS delegation tokens for processes without a keytab (Spark's Python tasks).

The process that has the Kerberos login (the Spark driver) gets a token through WebHDFS
(GETDELEGATIONTOKEN) and hands it on by the secret-reference mechanism (an environment
variable named by ``token_env``); :class:`DelegationToken` renews it at half its remaining life
until it is closed. A token that can no longer be renewed (past its maximum lifetime, or
cancelled) is replaced: :meth:`DelegationToken.refresh` gets a new one through the login and
hands it to ``on_new`` (which puts it where the tasks read it). A task that met a refused token
failed with :class:`~operators.fs.errors.TokenRefusedError`, having written nothing past its
last checkpoint; the driver refreshes the token before it runs the batch again.

On ``hdfs://`` the token comes through the cluster's WebHDFS (the address ``NativeHdfsFileSystem``
knows for truncate) and reaches hdfs-native as a token file (:mod:`.token_file`), which passes
over a token within a minute of its maximum date: such a token counts as ending then, so that
a new one is there before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from region.errors import ConfigError

from .settings import FileSystemSettings
from .token_file import MARGIN, max_date
from .webhdfs import WebHdfsFileSystem

__all__ = ["DelegationToken"]

logger = logging.getLogger(__name__)

#: Never renew more often than this (a token that is about to end is renewed each time).
_MIN_PAUSE = 1.0


class DelegationToken:
    """A delegation token of ``settings``' Kerberos login, renewed in a daemon thread."""

    def __init__(
        self, settings: FileSystemSettings, on_new: Callable[[str], None] | None = None
    ) -> None:
        if settings.kind not in ("webhdfs", "hdfs") or settings.kerberos_principal is None:
            raise ValueError(
                f"{settings.display()}: delegation tokens come from a Kerberos login on "
                "hdfs://, webhdfs:// or swebhdfs:// (kerberos_principal and keytab)"
            )
        self._fs = _token_source(settings)
        #: hdfs-native passes over a token this many seconds before its maximum date.
        self._margin = MARGIN if settings.kind == "hdfs" else 0.0
        # The short name of the principal renews its own token (Hadoop's renewer rule).
        renewer = settings.kerberos_principal.split("@", 1)[0].split("/", 1)[0]
        self._renewer = renewer
        #: Called with each new token after the first (from the renewal thread, or the caller
        #: of :meth:`refresh`).
        self.on_new = on_new
        self._lock = threading.Lock()
        #: The token (a secret: registered for scrubbing).
        self.token = self._fs.get_delegation_token(renewer=renewer)
        self.expires = self._usable_until(self.token, self._fs.renew_delegation_token(self.token))
        if self.expires <= time.time():
            life = max_date(self.token) - time.time()
            self._fs.cancel_delegation_token(self.token)
            msg = (
                f"{settings.display()}: the cluster's delegation tokens live {life:.0f} s, and "
                f"hdfs-native passes over a token in its last {MARGIN:.0f} s: the tasks could "
                "never use one (raise dfs.namenode.delegation.token.max-lifetime)"
            )
            raise ConfigError(msg)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="token-renewal", daemon=True)
        self._thread.start()
        logger.info(
            "%s: delegation token for the tasks, renewed until its maximum lifetime",
            settings.display(),
        )

    def _renew(self) -> None:
        while not self._stop.wait(max(_MIN_PAUSE, (self.expires - time.time()) / 2)):
            try:
                expires = self._usable_until(
                    self.token, self._fs.renew_delegation_token(self.token)
                )
            except OSError as err:  # mapped by the filesystem: no secret in it
                logger.warning("the tasks' delegation token could not be renewed (%s)", err)
                expires = self.expires
            if expires > self.expires:
                self.expires = expires
                continue
            # Not renewed, or renewed no further (its maximum lifetime): a new token, while
            # the old one still lets running tasks finish.
            try:
                self.refresh()
            except OSError as err:
                logger.error(
                    "no new delegation token for the tasks (%s): once the current one expires "
                    "their batch fails and is retried, which tries again",
                    err,
                )

    def _usable_until(self, token: str, expires: float) -> float:
        """When the tasks stop using ``token`` renewed until ``expires``: on hdfs://,
        :data:`MARGIN` before its maximum date."""
        if not self._margin:
            return expires
        return min(expires, max_date(token) - self._margin)

    def refresh(self) -> str:
        """Get a new token through the login, hand it to ``on_new``, cancel the old one (its
        tasks are done or will be retried); returns the new token. Raises ``OSError`` (one
        line) when the login cannot get one."""
        with self._lock:
            old = self.token
            token = self._fs.get_delegation_token(renewer=self._renewer)
            self.expires = self._usable_until(token, self._fs.renew_delegation_token(token))
            self.token = token
            if self.on_new is not None:
                self.on_new(token)
            logger.info("%s: a new delegation token for the tasks", self._fs.settings.display())
        try:
            self._fs.cancel_delegation_token(old)
        except OSError as err:
            logger.debug("the previous delegation token was not cancelled: %s", err)
        return token

    def close(self) -> None:
        """Stop renewing and cancel the token: nothing can use it after the job."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self._fs.cancel_delegation_token(self.token)
        except OSError as err:
            logger.warning("the tasks' delegation token could not be cancelled: %s", err)


def _token_source(settings: FileSystemSettings) -> WebHdfsFileSystem:
    """Where the login gets tokens: the WebHDFS of ``settings``, or of the cluster an
    ``hdfs://`` names (its address from ``webhdfs_uri`` or the Hadoop configuration)."""
    if settings.kind == "webhdfs":
        return WebHdfsFileSystem(settings)
    from .native import NativeHdfsFileSystem

    twin = NativeHdfsFileSystem(settings).webhdfs
    if twin is None:
        msg = (
            f"{settings.display()}: the tasks' delegation token comes through the cluster's "
            "WebHDFS, whose address is not known: give webhdfs_uri, or config_dir with "
            "dfs.namenode.http-address (https-address)"
        )
        raise ConfigError(msg)
    return twin
