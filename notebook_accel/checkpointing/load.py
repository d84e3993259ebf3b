"""``load_state``: validate a checkpoint against the Accelerator on every rank, then restore it.

Nothing is modified until every rank has read the manifest (every field's type, file names inside the folder),
compared it with its prepared objects (world size, number, kind and type of each object, model keys, shapes and
dtypes, optimizer parameter groups and buffer shapes, loader keys and value types, RNG parts restored into
throw-away generators), checked its files (regular files, sizes; the main process also checks SHA-256) and mapped
every file it needs with ``torch.load(weights_only=True, mmap=True)``. Only when all ranks report success is the
state applied: the small states first (put back if one of them fails), then optimizers and models, RNG last.
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from typing import Any, cast

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.atomic import read_torch
from notebook_accel.checkpointing.collective import read_collective
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Manifest, read_manifest
from notebook_accel.checkpointing.naming import checkpoints_root, complete_checkpoints, newest_checkpoint
from notebook_accel.checkpointing.objects import Saved, collect
from notebook_accel.checkpointing.recovery import recovery_candidate
from notebook_accel.checkpointing.save import automatic_naming, error_text, project_dir_of

__all__ = ["load_state", "compare"]


def _source(accelerator: Any, input_dir: str | os.PathLike[str] | None) -> str:
    """The checkpoint directory to load: ``input_dir``, or the newest complete automatic checkpoint."""
    if input_dir is not None:
        path = os.path.abspath(os.fspath(input_dir))
        return recovery_candidate(path) or path  # a commit killed between its renames left it aside
    if not automatic_naming(accelerator):
        raise CheckpointError(
            "load_state() needs an input_dir: automatic checkpoint naming is off. Pass load_state('path') (the "
            "path save_state returned), or turn on ProjectConfiguration(automatic_checkpoint_naming=True)."
        )
    return newest_checkpoint(checkpoints_root(project_dir_of(accelerator)))[1]


def _describe(types: list[str]) -> str:
    """``2 (SGD, Adam)``."""
    return f"{len(types)} ({', '.join(types)})" if types else "0"


def compare(manifest: Manifest, objects: list[Saved], world_size: int) -> list[str]:
    """Every difference between what the checkpoint holds and what the Accelerator has; empty when they match."""
    problems: list[str] = []
    if manifest.world_size != world_size:
        problems.append(
            f"the checkpoint was saved by {manifest.world_size} process(es), this run has {world_size}; resume with "
            f"num_processes={manifest.world_size}"
        )
    saved = Counter(e.kind for e in manifest.entries)
    here = Counter(s.entry.kind for s in objects)
    for kind in sorted(set(saved) | set(here)):
        ours = [s.entry.type_name for s in objects if s.entry.kind == kind]
        theirs = [e.type_name for e in manifest.entries_of(kind)]  # type: ignore[arg-type]
        if saved[kind] != here[kind]:
            problems.append(
                f"the checkpoint has {_describe(theirs)} {kind} object(s), this Accelerator has {_describe(ours)}; "
                "prepare (and register_for_checkpointing) the same objects in the same order before load_state"
            )
        elif kind in ("optimizer", "scheduler", "custom", "scaler") and ours != theirs:
            problems.append(f"{kind} types differ: {theirs} in the checkpoint, {ours} here")
    return problems


def _needed_files(objects: list[Saved], rank: int) -> list[str]:
    """The files this rank loads: the shared ones and its own per-rank ones."""
    return [s.entry.file.format(rank=rank) if s.entry.per_rank else s.entry.file for s in objects]


def _read_all(path: str, manifest: Manifest, objects: list[Saved], rank: int, main: bool) -> list[Any]:
    """Check and load every file this rank needs (objects already compared); raises CheckpointError."""
    files = _needed_files(objects, rank)
    # sizes for everything this rank reads; SHA-256 for all files on the main process, own files elsewhere
    own = [name for name, s in zip(files, objects, strict=True) if s.entry.per_rank]
    problems = manifest.verify_files(path, sorted(set(files) | set(manifest.all_files() if main else [])),
                                     checksum=False)
    if not problems:
        problems = manifest.verify_files(path, manifest.all_files() if main else own)
    if problems:
        raise CheckpointError(f"checkpoint {path!r} is damaged: " + "; ".join(problems))
    # collective readers (FSDP shards) read later, once every rank has validated its files
    payloads = [None if s.read is not None else read_torch(os.path.join(path, name)) for name, s in zip(files, objects,
                                                                                                     strict=True)]
    for saved, payload in zip(objects, payloads, strict=True):
        problems += saved.check(payload)  # a collective reader checks its state while reading
    if problems:
        raise CheckpointError(f"checkpoint {path!r} does not match this Accelerator: " + "; ".join(problems))
    return payloads


_APPLY_ORDER = ("custom", "dataloader", "scaler", "scheduler", "optimizer", "model", "rng")
_SMALL = ("custom", "dataloader", "scaler", "scheduler")  # cheap to copy, and their load_state_dict may be user code


def _apply(objects: list[Saved], payloads: list[Any]) -> str | None:
    """Load every validated payload into its object; returns an error message, or None.

    The small states go first, each copied before it is replaced: if one of their ``load_state_dict`` fails (user
    code the checks cannot foresee), those already loaded are put back and the models, optimizers and RNG were not
    touched. Models and optimizers (checked entry by entry) follow, the RNG comes last.
    """
    pairs = sorted(zip(objects, payloads, strict=True), key=lambda pair: _APPLY_ORDER.index(pair[0].entry.kind))
    undo: list[tuple[Saved, Any]] = []
    changed: list[str] = []  # models and optimizers already loaded: not put back
    for saved, payload in pairs:
        small = saved.entry.kind in _SMALL
        try:
            before = copy.deepcopy(saved.get()) if small else None
            saved.set(payload)
        except Exception as e:  # validated above; a failure here is a bug in an object's load_state_dict
            note = _undo(undo)
            if not small:
                note += f"; the state is partially restored: {', '.join(changed + [saved.entry.label()])} changed"
            return f"{saved.entry.label()}: {error_text(e)} ({note})"
        if small:
            undo.append((saved, before))
        else:
            changed.append(saved.entry.label())
    return None


def _undo(loaded: list[tuple[Saved, Any]]) -> str:
    """Put back the small states loaded before a failure; says what happened, for the error message."""
    try:
        for saved, before in reversed(loaded):
            saved.set(before)
    except Exception as e:  # noqa: BLE001 - reported: the load has failed already
        return f"putting back the {len(loaded)} object(s) loaded before it failed too: {error_text(e)}"
    return f"{len(loaded)} object(s) loaded before it were put back" if loaded else "nothing was modified"


def _validate(accelerator: Any, input_dir: str | os.PathLike[str] | None) -> tuple[str, Manifest, list[Any]]:
    """Everything one rank checks before the ranks agree: path, manifest, objects, files, payloads."""
    state = accelerator.state
    path = _source(accelerator, input_dir)
    manifest = read_manifest(path)
    objects = collect(accelerator)
    problems = compare(manifest, objects, state.num_processes)
    if problems:
        raise CheckpointError(f"checkpoint {path!r} does not match this Accelerator: " + "; ".join(problems))
    return path, manifest, _read_all(path, manifest, objects, state.process_index, state.is_main_process)


def load_state(accelerator: Any, input_dir: str | os.PathLike[str] | None = None) -> str:
    """Restore the training state saved by :func:`save_state` into ``accelerator``'s prepared objects.

    Restores models, optimizers, schedulers, the GradScaler, every prepared loader's position (the next
    ``iter(loader)`` continues exactly where the saved run was, mid-epoch included), registered objects,
    ``accelerator.step``, and every rank's RNG (restored last). Call it on every rank, after ``prepare`` and
    ``register_for_checkpointing`` with the same objects in the same order as the saving run.

    Args:
        accelerator: the Accelerator to restore into.
        input_dir: the checkpoint directory. ``None`` with automatic naming: the newest complete
            ``<project_dir>/checkpoints/checkpoint_<n>`` (partial saves are skipped), and
            ``project_configuration.iteration`` becomes ``n + 1`` so the next save does not collide.

    Returns:
        The absolute path of the loaded checkpoint.

    Raises:
        CheckpointError: on every rank, before anything is modified, when the checkpoint is missing, partial,
            damaged (missing files, wrong sizes or checksums), or does not match (other world size, other number,
            kind or type of objects, other model keys or shapes).

    Example:
        >>> accelerator.load_state("ckpt")     # doctest: +SKIP
    """
    state = accelerator.state
    world = state.num_processes
    path, manifest, error = "", None, None
    payloads: list[Any] = []
    try:
        path, manifest, payloads = _validate(accelerator, input_dir)
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    paths = agree(error, world, "load checkpoint", payload=path)
    if len(set(paths)) != 1:
        raise CheckpointError(f"the ranks resolved different checkpoints {paths}; pass load_state(input_dir).")
    payloads = read_collective(collect(accelerator), payloads, path, world)  # FSDP shards: every rank validated
    manifest = cast(Manifest, manifest)  # no rank failed, so this rank validated
    error = _apply(collect(accelerator), payloads)
    agree(error, world, f"load checkpoint {path!r}")
    if hasattr(accelerator, "step"):
        accelerator.step = manifest.step
    if manifest.iteration is not None and automatic_naming(accelerator):
        newest = complete_checkpoints(checkpoints_root(project_dir_of(accelerator)))
        accelerator.project_configuration.iteration = max([manifest.iteration] + [n for n, _ in newest]) + 1
    return path
