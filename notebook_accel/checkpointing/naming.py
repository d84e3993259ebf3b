"""Automatic checkpoint names (``<project_dir>/checkpoints/checkpoint_<n>``), finding the newest complete one,
and keeping at most ``total_limit``.

A directory counts as a checkpoint only when its name is ``checkpoint_<n>`` and it holds a manifest; partial
saves (``.tmp-...`` directories) and directories without a manifest are skipped.
"""

from __future__ import annotations

import os
import re

from notebook_accel.checkpointing.atomic import is_temporary, owner_alive, remove_dir
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import MANIFEST_NAME

__all__ = [
    "CHECKPOINTS_DIR",
    "checkpoints_root",
    "checkpoint_path",
    "complete_checkpoints",
    "newest_checkpoint",
    "rotate",
    "remove_stale_temporaries",
]

CHECKPOINTS_DIR = "checkpoints"
_NAME = re.compile(r"^checkpoint_(\d+)$")


def checkpoints_root(project_dir: str | None) -> str:
    """``<project_dir>/checkpoints``.

    Raises:
        CheckpointError: ``project_dir`` is not set.
    """
    if not project_dir:
        raise CheckpointError(
            "automatic checkpoint naming needs a project directory, and project_dir is None; pass "
            "Accelerator(project_dir=...) or ProjectConfiguration(project_dir=...), or give save_state/load_state "
            "an explicit directory."
        )
    return os.path.join(os.path.abspath(project_dir), CHECKPOINTS_DIR)


def checkpoint_path(project_dir: str | None, iteration: int) -> str:
    """``<project_dir>/checkpoints/checkpoint_<iteration>``."""
    return os.path.join(checkpoints_root(project_dir), f"checkpoint_{iteration}")


def complete_checkpoints(root: str) -> list[tuple[int, str]]:
    """``(iteration, path)`` of every complete checkpoint under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    found: list[tuple[int, str]] = []
    for name in os.listdir(root):
        match = _NAME.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, MANIFEST_NAME)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def newest_checkpoint(root: str) -> tuple[int, str]:
    """The newest complete checkpoint under ``root``.

    Raises:
        CheckpointError: there is none.
    """
    found = complete_checkpoints(root)
    if not found:
        raise CheckpointError(
            f"no complete checkpoint in {root!r} (partial saves are skipped); save one with save_state() first, "
            "or pass load_state(input_dir) explicitly."
        )
    return found[-1]


def rotate(root: str, total_limit: int | None, keep: str | None = None) -> list[str]:
    """Delete the oldest complete checkpoints so at most ``total_limit`` remain, never ``keep`` (the one just
    saved, even when its number is not the highest); returns the deleted paths."""
    if total_limit is None:
        return []
    found = [path for _, path in complete_checkpoints(root) if path != keep]
    doomed = found[: max(0, len(found) + (keep is not None) - total_limit)]
    for path in doomed:
        remove_dir(path)
    return doomed


def remove_stale_temporaries(root: str, keep: str | None = None) -> list[str]:
    """Delete leftover ``.tmp-`` directories (interrupted saves) under ``root``, except ``keep`` and those a
    live process may still be writing (:func:`~notebook_accel.checkpointing.atomic.owner_alive`)."""
    if not os.path.isdir(root):
        return []
    removed: list[str] = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if is_temporary(name) and path != keep and os.path.isdir(path) and not owner_alive(name):
            remove_dir(path)
            removed.append(path)
    return removed
