"""HDFS delegation tokens for processes without a keytab (Spark's Python tasks).

The process that has the Kerberos login (the Spark driver) gets a token through WebHDFS
(GETDELEGATIONTOKEN) and hands it on by the secret-reference mechanism (an environment
variable named by ``token_env``); :class:`DelegationToken` renews it at half its remaining life
until it is closed. A token past its maximum lifetime cannot be renewed: the renewal logs an
ERROR saying so, and the tasks that use it fail with one line (the NameNode refuses it), having
written nothing past their last checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time

from .errors import register_secret
from .settings import FileSystemSettings
from .webhdfs import WebHdfsFileSystem

__all__ = ["DelegationToken"]

logger = logging.getLogger(__name__)

#: Never renew more often than this (a token that is about to end is renewed each time).
_MIN_PAUSE = 1.0


class DelegationToken:
    """A delegation token of ``settings``' Kerberos login, renewed in a daemon thread."""

    def __init__(self, settings: FileSystemSettings) -> None:
        if settings.kind != "webhdfs" or settings.kerberos_principal is None:
            raise ValueError(
                f"{settings.display()}: delegation tokens come from a Kerberos login on "
                "webhdfs:// or swebhdfs:// (kerberos_principal and keytab)"
            )
        self._fs = WebHdfsFileSystem(settings)
        # The short name of the principal renews its own token (Hadoop's renewer rule).
        renewer = settings.kerberos_principal.split("@", 1)[0].split("/", 1)[0]
        #: The token (a secret: registered for scrubbing).
        self.token = self._fs.get_delegation_token(renewer=renewer)
        register_secret(self.token)
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
                self.expires = self._fs.renew_delegation_token(self.token)
            except OSError as err:  # mapped by the filesystem: no secret in it
                logger.error(
                    "the tasks' delegation token could not be renewed (%s): once it expires "
                    "they fail; run the job again to get a new one",
                    err,
                )
                return

    def close(self) -> None:
        """Stop renewing and cancel the token: nothing can use it after the job."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self._fs.cancel_delegation_token(self.token)
        except OSError as err:
            logger.warning("the tasks' delegation token could not be cancelled: %s", err)
