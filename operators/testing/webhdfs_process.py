"""The WebHDFS stand-in in a process of its own: :func:`start_process` starts this file as a
script and waits until the server listens, :class:`ServerProcess` stops or kills it (a killed
server cuts its uploads off as a dead machine does), :func:`main` is its command line (also
that of ``python -m operators.testing.webhdfs_server``).
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServerProcess", "main", "start_process"]


@dataclass
class ServerProcess:
    """A server running in a child process (this file run as a script)."""

    process: subprocess.Popen[str]
    port: int
    root: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def uri(self) -> str:
        return f"webhdfs://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: in-flight uploads are cut off as when a machine dies."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait()


def start_process(
    root: str | os.PathLike[str], *, port: int = 0, soft_limit: float = 1.0
) -> ServerProcess:
    """Start the server in a child process and wait until it listens."""
    # This file as a script, not ``-m operators.testing.webhdfs_server``: ``-m`` imports the
    # toolkit package (hypothesis, the operators), about 0.3 s more for every start and restart,
    # where the script imports only the server's own modules (_bare_packages), which need only
    # the standard library. ``-P`` keeps this directory off ``sys.path``.
    cmd = [sys.executable, "-P", os.fspath(Path(__file__).resolve()), "--root", os.fspath(root)]
    cmd += ["--port", str(port), "--soft-limit", str(soft_limit)]
    # The directory above the ``operators`` package (the checkout): a relative ``root`` is
    # taken from there, whoever the caller is.
    cwd = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the WebHDFS test server did not start: {line!r}")
    return ServerProcess(proc, int(line.rsplit(":", 1)[1]), Path(root))


def main(argv: list[str] | None = None) -> int:
    # Here, not at the top: run as a script, this file first registers the packages above it
    # without running their ``__init__`` (_bare_packages), and only then imports the server.
    from operators.testing.webhdfs_standin import WebHdfsServer

    parser = argparse.ArgumentParser(description="WebHDFS-protocol test server")
    parser.add_argument("--root", required=True, help="backing directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--soft-limit", type=float, default=1.0, help="lease recovery seconds")
    parser.add_argument("--truncate-recovery", type=float, default=0.1)
    args = parser.parse_args(argv)
    os.makedirs(args.root, exist_ok=True)
    server = WebHdfsServer(
        args.root,
        host=args.host,
        port=args.port,
        soft_limit=args.soft_limit,
        truncate_recovery=args.truncate_recovery,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server.start()
    except OSError as err:
        print(f"FAILED {err}", flush=True)
        return 1 if err.errno != errno.EADDRINUSE else 2
    print(f"READY {server.url}", flush=True)
    stop.wait()
    server.stop()
    return 0


def _bare_packages() -> None:
    """Register ``operators`` and ``operators.testing`` (the directories this file is in)
    without running their ``__init__``, so that the server's modules import as themselves and
    nothing else does: ``operators.testing``'s ``__init__`` imports the replay toolkit and
    hypothesis, which the server does not use."""
    here = Path(__file__).resolve().parent
    for name, directory in (("operators", here.parent), ("operators.testing", here)):
        spec = importlib.util.spec_from_file_location(
            name, directory / "__init__.py", submodule_search_locations=[os.fspath(directory)]
        )
        assert spec is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)


if __name__ == "__main__":
    _bare_packages()
    raise SystemExit(main())
