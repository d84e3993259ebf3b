"""Cleaning up after saves that were killed, and getting back the checkpoint a killed commit left aside.

A save builds ``.tmp-<name>-<owner>-<nonce>`` next to the target and commits it with two renames: the old
checkpoint to ``.tmp-<name>-<owner>-<nonce>.old``, then the new one into place (:func:`~.atomic.commit_dir`). A kill can
leave:

- a partial ``.tmp-<name>-...`` (killed while writing): debris, deleted by the next save to that target;
- no checkpoint at the target (killed between the two renames), with the old one under its ``.old`` name and the
  new, complete one (its manifest is written before the renames) under ``.tmp-``: the next save restores the
  newer complete one and deletes the rest; ``load_state`` reads it where it lies, changing nothing.

Only directories whose owner process is dead (same machine) are touched; another machine's, or a live save's,
are left alone (:func:`~.atomic.owner_alive`). The target's name is read from each temporary name exactly
(:func:`~.atomic.temp_target`): another checkpoint's leftovers (``run-pretrain`` next to ``run``) are not
taken for this one's.
"""

from __future__ import annotations

import os

from notebook_accel.checkpointing.atomic import fsync_dir, owner_alive, remove_dir, temp_target
from notebook_accel.checkpointing.manifest import MANIFEST_NAME

__all__ = ["leftovers", "recovery_candidate", "recover"]


def _dead_temporaries(parent: str) -> list[tuple[str, str, str]]:
    """(target name, tag, directory) of every temporary directory in ``parent`` whose save is dead."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    found = []
    for entry in entries:
        parsed = temp_target(entry)
        if parsed is not None and not owner_alive(entry):
            full = os.path.join(parent, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                found.append((*parsed, full))
    return found


def leftovers(path: str) -> list[tuple[str, str]]:
    """(tag, directory) of every dead save's temporary directory for the target ``path``, newest first."""
    parent, name = os.path.split(os.path.abspath(path))
    found = [(tag, full) for target, tag, full in _dead_temporaries(parent) if target == name]
    return sorted(found, key=lambda item: os.path.getmtime(item[1]), reverse=True)


def _nothing_to_recover(tag: str, directory: str) -> bool:
    """A dead save's directory no load or save could want: a partial one (no manifest) or one being deleted."""
    return tag == "del" or (tag == "" and not _complete(directory))


def _complete(directory: str) -> bool:
    """A committed-to-be checkpoint: its manifest is written last, after every file."""
    return os.path.isfile(os.path.join(directory, MANIFEST_NAME))


def recovery_candidate(path: str) -> str | None:
    """When ``path`` is missing: the complete checkpoint a killed commit left aside (the new one, else the old
    one), to load from; ``None`` when ``path`` exists or nothing complete is left."""
    if os.path.lexists(path):
        return None
    items = leftovers(path)
    for wanted in ("", "old"):
        for tag, directory in items:
            if tag == wanted and _complete(directory):
                return directory
    return None


def recover(path: str) -> str | None:
    """Before a save to ``path`` (main process): put back the checkpoint a killed commit left aside, delete
    every other dead save's leftovers for ``path``, and the partial folders dead saves to other targets in the
    same folder left (a complete one, or an old checkpoint moved aside, stays: a load or save of its target
    recovers it).

    Returns:
        The directory that was restored to ``path``, or ``None``.
    """
    restored = recovery_candidate(path)
    if restored is not None:
        os.rename(restored, path)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    for _, directory in leftovers(path):
        remove_dir(directory)
    for _, tag, directory in _dead_temporaries(os.path.dirname(os.path.abspath(path))):
        if _nothing_to_recover(tag, directory):  # other targets' debris: what a killed write left, not a commit
            remove_dir(directory)
    return restored
