"""Automatic checkpoint names (``<project_dir>/checkpoints/checkpoint_<n>``), finding the newest complete one,
and keeping at most ``total_limit``.

A directory counts as a checkpoint only when its name is ``checkpoint_<n>`` and it holds a manifest; partial
saves (``.tmp-...`` directories) and directories without a manifest are skipped. One exception: a save killed
between finishing ``checkpoint_<n>`` and renaming it into place leaves it complete under a ``.tmp-`` name (see
:mod:`.recovery`); while ``checkpoint_<n>`` itself is missing, that folder counts as checkpoint ``n`` (so an
automatic ``load_state()`` resumes from it, as ``load_state(path)`` does), and the next automatic save puts it back
under its name.
"""

from __future__ import annotations

import os
import re

from notebook_accel.checkpointing.atomic import is_temporary, owner_alive, remove_dir, temp_target
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import MANIFEST_NAME
from notebook_accel.checkpointing.recovery import recover, recovery_candidate

__all__ = [
    "CHECKPOINTS_DIR",
    "checkpoints_root",
    "checkpoint_path",
    "complete_checkpoints",
    "newest_checkpoint",
    "rotate",
    "remove_stale_temporaries",
    "restore_left_aside",
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
    """``(iteration, path)`` of every complete checkpoint under ``root``, oldest first (for a missing
    ``checkpoint_<n>``, the complete folder a killed commit left aside, see the module's docstring)."""
    if not os.path.isdir(root):
        return []
    found: dict[int, str] = {}
    names = os.listdir(root)
    for name in names:
        match = _NAME.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, MANIFEST_NAME)):
            found[int(match.group(1))] = path
    for name in names:
        target = temp_target(name)
        match = _NAME.match(target[0]) if target is not None else None
        if match is not None and int(match.group(1)) not in found:
            candidate = recovery_candidate(os.path.join(root, target[0]))  # type: ignore[index]
            if candidate is not None:
                found[int(match.group(1))] = candidate
    return sorted(found.items())


def restore_left_aside(root: str) -> list[str]:
    """Main process, after an automatic save: put every complete checkpoint a killed commit left under a
    temporary name back under its own name; returns the restored paths."""
    restored = []
    for number, path in complete_checkpoints(root):
        target = os.path.join(root, f"checkpoint_{number}")
        if is_temporary(os.path.basename(path)) and recover(target) is not None:
            restored.append(target)
    return restored


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
