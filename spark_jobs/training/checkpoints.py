"""Per-epoch training checkpoints under any fsspec URL, for the retries of one run.

A local path, ``abfs://container/path`` or ``abfss://container@account...`` through adlfs,
and so on; credentials for remote storage come from the environment (adlfs reads
``AZURE_STORAGE_CONNECTION_STRING``), never from the command line.
"""

from __future__ import annotations

import io
import posixpath
import re
from typing import Any


class Checkpoints:
    """Training state after each epoch, ``epoch-<n>.pt`` under an fsspec URL.

    A checkpoint holds the model and optimizer state, the epoch and the metrics history so
    far. It is written under a temporary name and then moved into place, so a job killed
    while writing leaves the previous checkpoint as the latest; older ones are removed.
    They serve the retries of one unfinished run only: once its model is logged, the job
    removes them all (:meth:`remove_all`).
    """

    NAME = re.compile(r"^epoch-(\d+)\.pt$")

    def __init__(self, url: str) -> None:
        import fsspec

        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url)

    def _path(self, epoch: int) -> str:
        return posixpath.join(self.root, f"epoch-{epoch:04d}.pt")

    def epochs(self) -> list[int]:
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := self.NAME.match(posixpath.basename(name.rstrip("/")))))

    def latest_epoch(self) -> int:
        """The last epoch with a checkpoint; 0 when there is none."""
        return max(self.epochs(), default=0)

    def load(self, epoch: int) -> dict[str, Any]:
        import torch

        with self.fs.open(self._path(epoch), "rb") as stream:
            return torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)

    def save(self, epoch: int, state: dict[str, Any]) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        if not self.fs.exists(self.root):
            self.fs.mkdir(self.root, create_parents=True)  # adlfs: creates the container if needed
        partial = f"{self._path(epoch)}.partial"
        self.fs.pipe_file(partial, buffer.getvalue())
        self.fs.mv(partial, self._path(epoch))
        for older in self.epochs():
            if older < epoch:
                self.fs.rm(self._path(older))

    def remove_all(self) -> list[int]:
        """Remove this run's checkpoints and partial writes; return the epochs removed.

        A run cleared after success then trains from scratch instead of resuming after its
        last epoch and logging the old weights as a new model. Only files this class writes
        are removed, never the folder with anything else in it (a URL given by hand may
        name a container); an emptied local folder goes too.
        """
        epochs = self.epochs()
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return epochs
        for name in names:
            base = posixpath.basename(name.rstrip("/"))
            if self.NAME.match(base) or self.NAME.match(base.removesuffix(".partial")):
                self.fs.rm(name)
        if "file" in self.fs.protocol and not self.fs.ls(self.root, detail=False):
            self.fs.rmdir(self.root)
        return epochs
