"""A local filesystem whose writers can close later, as on HDFS, for tests of what waits for
a close: there a close waits until a DataNode has reported the file's last block (500 ms on a
small cluster), so the critical path must leave it to the background."""

from __future__ import annotations

from operators.fs.local import LocalFileSystem
from region.fs import FileWriter


class LaterClosing(LocalFileSystem):
    """Local files whose writers have ``close_later``; each close (``"close"`` or
    ``"close_later"``) and each rename recorded in ``steps``, in order, with its path."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[str, str]] = []
        self.created: list[str] = []

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> FileWriter:
        writer = super().create(path, overwrite=overwrite, permission=permission)
        self.created.append(path)
        steps, close = self.steps, writer.close

        def close_now() -> None:
            steps.append(("close", path))
            close()

        def close_later() -> None:
            steps.append(("close_later", path))
            close()

        writer.close = close_now  # type: ignore[method-assign]
        writer.close_later = close_later  # type: ignore[attr-defined]
        return writer

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self.steps.append(("rename", src))
        super().rename(src, dst, overwrite=overwrite)

    def closes(self) -> list[tuple[str, str]]:
        """The closes alone, in order."""
        return [(how, path) for how, path in self.steps if how != "rename"]
