"""HDFS delegation tokens for processes without a keytab (Spark's Python tasks).

The process that has the Kerberos login (the Spark driver) gets a token through WebHDFS
(GETDELEGATIONTOKEN) and hands it on by the secret-reference mechanism (an environment
variable named by ``token_env``); :class:`DelegationToken` renews it at half its remaining life
until it is closed. A token that can no longer be renewed (past its maximum lifetime, or
cancelled) is replaced: :meth:`DelegationToken.refresh` gets a new one through the login and
hands it to ``on_new`` (which puts it where the tasks read it). A task that met a refused token
failed with :class:`~operators.fs.errors.TokenRefusedError`, having written nothing past its
last checkpoint; the driver refreshes the token before it runs the batch again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .settings import FileSystemSettings
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
        if settings.kind != "webhdfs" or settings.kerberos_principal is None:
            raise ValueError(
                f"{settings.display()}: delegation tokens come from a Kerberos login on "
                "webhdfs:// or swebhdfs:// (kerberos_principal and keytab)"
            )
        self._fs = WebHdfsFileSystem(settings)
        # The short name of the principal renews its own token (Hadoop's renewer rule).
        renewer = settings.kerberos_principal.split("@", 1)[0].split("/", 1)[0]
        self._renewer = renewer
        #: Called with each new token after the first (from the renewal thread, or the caller
        #: of :meth:`refresh`).
        self.on_new = on_new
        self._lock = threading.Lock()
        #: The token (a secret: registered for scrubbing).
        self.token = self._fs.get_delegation_token(renewer=renewer)
        self.expires = self._fs.renew_delegation_token(self.token)
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
                expires = self._fs.renew_delegation_token(self.token)
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

    def refresh(self) -> str:
        """Get a new token through the login, hand it to ``on_new``, cancel the old one (its
        tasks are done or will be retried); returns the new token. Raises ``OSError`` (one
        line) when the login cannot get one."""
        with self._lock:
            old = self.token
            token = self._fs.get_delegation_token(renewer=self._renewer)
            self.expires = self._fs.renew_delegation_token(token)
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
