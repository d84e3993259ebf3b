"""``save_state``: write every prepared object and every rank's RNG into a checkpoint, atomically
(``save_model`` is in :mod:`notebook_accel.checkpointing.export`).

A save goes in three agreed phases (each ends with :func:`~notebook_accel.checkpointing.agreement.agree`, an
all-gather of per-rank errors that also acts as a barrier):

1. the main process checks the target and creates the temporary sibling ``.tmp-<name>-<nonce>``;
2. every rank writes its files into it (the main process the shared ones, each rank its own RNG and loader
   states), each flushed and fsynced;
3. the main process records sizes and checksums of every file in ``manifest.json``, fsyncs, renames the directory
   into place, then (automatic naming) deletes the oldest checkpoints beyond ``total_limit``.

The checksums (XXH3-128, :mod:`~notebook_accel.checkpointing.checksum`) are computed while the files are written,
by the rank that writes them, and reach the main process with the agreement that ends phase 2: nothing is read
back (FSDP's DCP shards are hashed inside DCP's writer too). Only a collective writer's own-rank file that was not
hashed while it was written is hashed after the write, by its own rank.

A failure anywhere makes every rank raise the same :class:`CheckpointError`; the temporary directory is removed
and the previous checkpoint is untouched. A process killed mid-save leaves only a ``.tmp-`` directory, which
automatic loading ignores and the next successful automatic save deletes.
"""

from __future__ import annotations

import os
import secrets
from typing import Any, cast

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.atomic import commit_dir, file_digest, make_dir, remove_dir, temp_sibling, write_torch
from notebook_accel.checkpointing.checksum import recording
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.folders import Folders, folder_key
from notebook_accel.checkpointing.manifest import MANIFEST_NAME, Manifest, write_manifest, written_format
from notebook_accel.checkpointing.naming import (
    checkpoint_path,
    checkpoints_root,
    remove_stale_temporaries,
    restore_left_aside,
    rotate,
)
from notebook_accel.checkpointing.objects import Saved, collect
from notebook_accel.checkpointing.recovery import recover
from notebook_accel.argument_checks import checked_folder

__all__ = ["save_state", "write_and_commit", "error_text", "automatic_naming", "project_dir_of"]


def error_text(e: BaseException) -> str:
    """A one-line description of an exception for the cross-rank error report."""
    return str(e) if isinstance(e, CheckpointError) else f"{type(e).__name__}: {e}"


def automatic_naming(accelerator: Any) -> bool:
    """True when the Accelerator's ProjectConfiguration asks for automatic checkpoint naming."""
    config = getattr(accelerator, "project_configuration", None)
    return bool(getattr(config, "automatic_checkpoint_naming", False))


def project_dir_of(accelerator: Any) -> str | None:
    """The project directory (``accelerator.project_dir``, else the ProjectConfiguration's)."""
    value = getattr(accelerator, "project_dir", None)
    if value is None:
        value = getattr(getattr(accelerator, "project_configuration", None), "project_dir", None)
    return None if value is None else os.fspath(value)


def _target(accelerator: Any, output_dir: str | os.PathLike[str] | None) -> tuple[str, int | None]:
    """The directory to save into and, with automatic naming, its iteration number."""
    if output_dir is not None:
        return os.path.abspath(os.fspath(output_dir)), None
    if not automatic_naming(accelerator):
        raise CheckpointError(
            "save_state() needs an output_dir: automatic checkpoint naming is off. Pass save_state('path'), or "
            "Accelerator(project_config=ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True))."
        )
    iteration = int(accelerator.project_configuration.iteration)
    return checkpoint_path(project_dir_of(accelerator), iteration), iteration


def _check_target(path: str, automatic: bool) -> None:
    """Refuse to replace anything that is not an empty directory or a previous checkpoint."""
    if not os.path.lexists(path):
        return
    if automatic:
        raise CheckpointError(
            f"the automatic checkpoint {path!r} already exists; load_state() sets the next iteration for you, or set "
            "project_configuration.iteration to a number not used yet."
        )
    if not os.path.isdir(path):
        raise CheckpointError(f"output_dir {path!r} exists and is not a directory; choose another path.")
    if os.listdir(path) and not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        raise CheckpointError(
            f"output_dir {path!r} is a non-empty directory that is not a notebook-accel checkpoint; saving would "
            "replace its contents. Choose a new or empty directory."
        )


def _phase_prepare(path: str, automatic: bool) -> str:
    """Main process: recover what a killed save left, check the target, create the parent and the temporary
    directory; returns the latter."""
    recover(path)
    _check_target(path, automatic)
    make_dir(os.path.dirname(path), exist_ok=True)
    temp = temp_sibling(path)
    make_dir(temp)
    return temp


Digests = dict[str, tuple[int, str]]  # file name -> (size, XXH3-128 digest)


def _write_files(objects: list[Saved], snapshot: dict[int, Any], temp: str, rank: int, main: bool) -> Digests:
    """Write this rank's share of the files into ``temp`` (``main``: the folder's leader, which writes the shared
    files); collective writers (FSDP shards) first, so every rank reaches them whatever happens to its own files.

    Returns the size and digest of every file this rank wrote (a collective writer's own-rank file included)."""
    with recording() as ledger:
        for i, saved in enumerate(objects):
            if saved.write is not None:
                saved.write(temp, snapshot[i])
                own = os.path.join(temp, saved.entry.file.format(rank=rank))
                if saved.entry.per_rank and os.path.abspath(own) not in ledger and os.path.isfile(own):
                    ledger[os.path.abspath(own)] = file_digest(own)  # not hashed while written: here, from the cache
        for i, saved in enumerate(objects):
            if saved.write is not None:
                continue
            if saved.entry.per_rank:
                write_torch(os.path.join(temp, saved.entry.file.format(rank=rank)), snapshot[i])
            elif main:
                state = snapshot[i] if i in snapshot else saved.get()  # a background save's snapshot holds it
                write_torch(os.path.join(temp, saved.entry.file), state)
    folder = os.path.abspath(temp)
    return {os.path.basename(p): v for p, v in ledger.items() if os.path.dirname(p) == folder}


def _phase_commit(accelerator: Any, objects: list[Saved], temp: str, path: str, iteration: int | None,
                  digests: Digests, group: tuple[list[int], str] | None = None) -> None:
    """A folder's leader: write the manifest (with the ``digests`` its ranks computed while writing), rename into
    place, rotate old automatic checkpoints. ``group``: the ranks this folder holds and the save's id, when the
    ranks save into different folders."""
    world = accelerator.state.num_processes
    entries = [s.entry for s in objects]
    manifest = Manifest(world_size=world, entries=entries, step=int(getattr(accelerator, "step", 0) or 0),
                        iteration=iteration, format_version=written_format(entries))
    if group is not None:
        manifest.ranks, manifest.save_id = group
    missing = [n for n in manifest.all_files() if not os.path.isfile(os.path.join(temp, n))]
    if missing:
        raise CheckpointError(
            f"files written by other ranks are not visible to the main process in {temp!r}: {missing}. The "
            "checkpoint directory must be on a file system shared by all processes."
        )
    manifest.record_files(temp, digests)
    write_manifest(temp, manifest)
    commit_dir(temp, path)
    if iteration is not None:
        root = checkpoints_root(project_dir_of(accelerator))
        restore_left_aside(root)
        rotate(root, getattr(accelerator.project_configuration, "total_limit", None), keep=path)
        remove_stale_temporaries(root)


def _folders(accelerator: Any, objects: list[Saved], path: str, world: int, action: str) -> Folders:
    """Every rank's folder (one exchange); raises on every rank when they differ but a state needs one folder."""
    each_node = bool(getattr(getattr(accelerator, "project_configuration", None), "save_on_each_node", False))
    folders = Folders.of([tuple(key) for key in agree(None, world, action, payload=folder_key(path, each_node))])
    collective = [s.entry.label() for s in objects if s.write is not None]
    if folders.split and collective:
        raise CheckpointError(
            f"could not {action}: the ranks save into different folders ({folders.two_paths()}), but "
            f"{collective[0]} is written by the ranks together into one folder (an FSDP or DeepSpeed state). Pass "
            "the same output_dir on every rank, on a file system all of them reach (and leave save_on_each_node "
            "off)."
        )
    return folders


def save_state(accelerator: Any, output_dir: str | os.PathLike[str] | None = None) -> str:
    """Save the whole training state of ``accelerator`` into a checkpoint directory, atomically.

    Saves every prepared model (unwrapped weights), optimizer, scheduler, the GradScaler, every prepared loader's
    position/epoch/shuffle state and every rank's RNG (python, numpy, torch, cuda), and the objects given to
    ``register_for_checkpointing``. Called on every rank (it synchronises them).

    Ranks may save into different folders, as in accelerate: another ``output_dir`` on each rank (a node-local
    disk), or ``ProjectConfiguration(save_on_each_node=True)`` with the same path on every machine. Each folder
    then holds what its ranks need to resume (the shared files, and their own RNG and loader states), and each
    rank loads its own folder (:mod:`~notebook_accel.checkpointing.folders`). A state that every rank writes
    into one folder (FSDP's sharded state dict, DeepSpeed's checkpoint) is refused there.

    Args:
        accelerator: the Accelerator whose state to save.
        output_dir: where to save. ``None`` with automatic naming: ``<project_dir>/checkpoints/checkpoint_<n>``,
            then ``project_configuration.iteration`` is incremented and at most ``total_limit`` checkpoints are
            kept (the oldest deleted after the new one is complete). An explicit ``output_dir`` is used as given
            (even with automatic naming on); an existing checkpoint there is replaced atomically.

    Returns:
        The absolute path of the checkpoint.

    Raises:
        CheckpointError: on every rank, when any rank failed (disk full, unwritable directory, an object without
            ``state_dict``, a target that is not a checkpoint); the previous checkpoint is left intact.

    Example:
        >>> path = accelerator.save_state("ckpt")          # doctest: +SKIP
        >>> accelerator.load_state(path)                   # doctest: +SKIP
    """
    checked_folder(output_dir, "save_state(output_dir=...)", optional=True)
    objects = collect(accelerator)
    path, iteration = _target(accelerator, output_dir)
    folders = _folders(accelerator, objects, path, accelerator.state.num_processes, f"save checkpoint {path!r}")
    error: str | None = None
    snapshot: dict[int, Any] = {}
    try:  # per-rank and collective (FSDP) states first, the RNG before anything else runs
        snapshot = {i: s.get() for i, s in enumerate(objects) if s.entry.per_rank or s.write is not None}
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    write_and_commit(accelerator, objects, snapshot, path, iteration, folders, error)
    if iteration is not None:
        accelerator.project_configuration.iteration = iteration + 1
    return path


def write_and_commit(accelerator: Any, objects: list[Saved], snapshot: dict[int, Any], path: str,
                     iteration: int | None, folders: Folders, error: str | None) -> None:
    """Phases 1 to 3 of a save (every rank calls it): the temporary directory, every rank's files, the agreed
    commit. ``snapshot``: the states taken so far, by object index (any other object's state is read when its file
    is written); ``error``: this rank's failure while taking them, which fails the save on every rank.

    Raises:
        CheckpointError: on every rank, when any rank failed; the temporary directory is removed.
    """
    state = accelerator.state
    world, rank = state.num_processes, state.process_index
    action = f"save checkpoint {path!r}"
    main = folders.leaders[rank] == rank  # this rank writes its folder's shared files and commits it
    temp: str | None = None
    try:
        if main and error is None:
            temp = _phase_prepare(path, iteration is not None)
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    try:
        temps = agree(error, world, action, payload=(temp, secrets.token_hex(8)))  # each folder's temporary one
        shared = cast(str, temps[folders.leaders[rank]][0])
        group = (list(folders.ranks_of(rank)), temps[0][1]) if folders.split else None
        error = None
        written: Digests = {}
        try:
            written = _write_files(objects, snapshot, shared, rank, main)
        except Exception as e:  # any failure must reach the other ranks, or they would wait forever
            error = error_text(e)
        every = agree(error, world, action, payload=written)
        if main:
            try:
                digests = {k: v for r in folders.ranks_of(rank) for k, v in every[r].items()}
                _phase_commit(accelerator, objects, shared, path, iteration, digests, group)
            except Exception as e:
                error = error_text(e)
        agree(error, world, action)
    finally:  # on failure (here or on another rank) the partial directory goes; after a commit it is gone already
        if temp is not None and os.path.lexists(temp):
            remove_dir(temp)
