"""Hostile checkpoint files for the tests: a pickle that runs code when unpickled in full, and a manifest made to
agree with a rewritten file (anyone who can write the file can update its size and checksum)."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import torch

from notebook_accel.checkpointing.atomic import file_digest
from notebook_accel.checkpointing.manifest import MANIFEST_NAME

__all__ = ["CodeRunning", "torch_bytes", "record"]


class CodeRunning:
    """Unpickled in full, this creates the directory ``marker`` (``os.mkdir``): proof that the file ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (self.marker,)


def torch_bytes(obj: Any) -> bytes:
    """``torch.save(obj)`` as bytes."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def record(path: str | os.PathLike[str], *names: str) -> None:
    """Make the manifest of checkpoint ``path`` agree with the files ``names`` as they are now (size, XXH3-128)."""
    file = os.path.join(path, MANIFEST_NAME)
    with open(file) as f:
        data = json.load(f)
    for name in names:
        size, digest = file_digest(os.path.join(path, name))
        data["files"][name] = {"size": size, "xxh3_128": digest}
    with open(file, "w") as f:
        json.dump(data, f)
