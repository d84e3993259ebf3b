"""``load_state``: validate a checkpoint against the Accelerator on every rank, then restore it.

Nothing is modified until every rank has read the manifest (every field's type, file names inside the folder),
compared it with its prepared objects (world size, number, kind and type of each object, model keys, shapes and
dtypes, optimizer parameter groups and buffer shapes, loader keys and value types, RNG parts restored into
throw-away generators), checked its files (regular files, sizes, and its share of the checksums: every file's is
checked by one rank, see :func:`checked_by`) and mapped every file it needs with
``torch.load(weights_only=True, mmap=True)``. A checksum is computed through a memory mapping of the file, which
leaves its pages in the cache for the mapped load: the check costs a pass of the hash over memory, not another read.
Collective states (FSDP shards) are read into fresh tensors after that agreement, and their shard files are
checked while they are read (:mod:`.verified_reads`): each is read once, and nothing is applied before every rank
has read and checked its part (:mod:`.collective`). Only when all ranks report success is the state applied: the small states first (put back if one of them fails),
then optimizers and models, RNG last.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections import Counter
from typing import Any, cast

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.atomic import is_temporary, read_torch, temp_target
from notebook_accel.checkpointing.collective import read_collective
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Manifest, read_manifest
from notebook_accel.checkpointing.naming import checkpoints_root, complete_checkpoints, newest_checkpoint
from notebook_accel.checkpointing.objects import Saved, collect
from notebook_accel.checkpointing.recovery import recovery_candidate
from notebook_accel.checkpointing.save import automatic_naming, error_text, project_dir_of
from notebook_accel.checkpointing.verified_reads import Expected
from notebook_accel.argument_checks import checked_folder
from notebook_accel.errors import shown

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


def _named(path: str) -> str:
    """``path`` as an error names it: relative to the working directory when inside it (a notebook's own folder, not
    the machine's absolute path), else as it is."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _describe(types: list[str]) -> str:
    """``2 (SGD, Adam)``."""
    return f"{len(types)} ({', '.join(types)})" if types else "0"


#: what a resume with another number of processes cannot restore: one state per rank, meaningless for other ranks.
PER_RANK_KINDS: tuple[str, ...] = ("rng", "dataloader")


def _world_problem(saved: int, here: int) -> str:
    """Why a checkpoint of ``saved`` processes is not loaded into ``here`` by default, and the two ways on."""
    return (f"the checkpoint was saved by {saved} process(es), this run has {here}. Resume with num_processes={saved} "
            "for an exact resume, or call load_state(path, allow_world_size_change=True) to restore the models "
            "(FSDP shards are resharded), optimizers, schedulers, the GradScaler, registered objects and the step, "
            "but not the per-rank RNG streams nor the loaders' positions (they stay as this run set them: the "
            "loaders start at their first batch)")


def compare(manifest: Manifest, objects: list[Saved], world_size: int, skipped: tuple[str, ...] = ()) -> list[str]:
    """Every difference between what the checkpoint holds and what the Accelerator has; empty when they match.

    ``skipped``: kinds not loaded (per-rank states in a resume with another world size), so not compared.
    """
    problems: list[str] = []
    fixed = [s for s in objects if s.fixed_world] if manifest.world_size != world_size else []
    if fixed:
        problems.append(f"the checkpoint was saved by {manifest.world_size} process(es), this run has {world_size}: "
                        f"{fixed[0].entry.label()}: {fixed[0].fixed_world}")
    elif manifest.world_size != world_size and not skipped:
        problems.append(_world_problem(manifest.world_size, world_size))
    saved = Counter(e.kind for e in manifest.entries if e.kind not in skipped)
    here = Counter(s.entry.kind for s in objects if s.entry.kind not in skipped)
    for kind in sorted(set(saved) | set(here)):
        ours = [s.entry.type_name for s in objects if s.entry.kind == kind]
        theirs = [e.type_name for e in manifest.entries_of(kind)]
        if saved[kind] != here[kind]:
            problems.append(
                f"the checkpoint has {_describe(theirs)} {kind} object(s), this Accelerator has {_describe(ours)}; "
                "prepare (and register_for_checkpointing) the same objects in the same order before load_state"
            )
        elif kind in ("optimizer", "scheduler", "custom", "scaler") and ours != theirs:
            problems.append(f"{kind} types differ: {theirs} in the checkpoint, {ours} here")
    return problems or _layout_problems(manifest, objects)


def _layout_problems(manifest: Manifest, objects: list[Saved]) -> list[str]:
    """Models and optimizers saved in another file layout (plain vs FSDP) than this Accelerator reads."""
    saved = {(e.kind, e.index): e for e in manifest.entries}
    problems = []
    for s in objects:
        entry = saved.get((s.entry.kind, s.entry.index))
        if s.entry.kind in ("model", "optimizer") and entry is not None and entry.file != s.entry.file:
            problems.append(
                f"{s.entry.label()} is stored as {entry.file!r} in the checkpoint, but this Accelerator reads "
                f"{s.entry.file!r}: a run with an FSDP plugin saves in the FSDP layout (whatever its number of "
                "processes) and can load only that; save and load with the same FSDP setting")
    return problems


def _needed_files(objects: list[Saved], rank: int, world: int) -> list[str]:
    """The files this rank reads: the shared ones, its own per-rank ones, and every shard of a collective state
    (DCP reads from any rank's file when it reshards to another number of processes)."""
    files: list[str] = []
    for s in objects:
        if s.read is not None:
            files += s.entry.files(world)
        else:
            files.append(s.entry.file.format(rank=rank) if s.entry.per_rank else s.entry.file)
    return files


def checked_by(manifest: Manifest, needed: list[str], rank: int, world: int) -> list[str]:
    """The files whose checksum ``rank`` checks (of ``world`` ranks; ``needed``: the files it reads).

    Into one folder (the usual case) the ranks share the work, so every file is hashed once: a per-rank file by
    the rank that reads it (saved rank ``s`` by rank ``s % world``), the others to the rank with the fewest bytes
    so far, largest first. Every rank computes the same split from the manifest. After a save into per-rank
    folders, which ranks load a folder is the user's choice, so each rank checks every file it reads there.
    """
    if manifest.ranks is not None:
        return sorted(set(needed) & set(manifest.all_files()))
    load = [0] * world
    mine: list[str] = []
    owner = {e.file.format(rank=s): s % world
             for e in manifest.entries if e.per_rank for s in range(manifest.world_size)}
    rest = [name for name in manifest.all_files() if name not in owner]
    for name in [n for n in manifest.all_files() if n in owner] + sorted(rest, key=lambda n: (-_size(manifest, n), n)):
        who = owner.get(name, load.index(min(load)))
        load[who] += _size(manifest, name)
        if who == rank:
            mine.append(name)
    return mine


def _size(manifest: Manifest, name: str) -> int:
    """The size of file ``name`` in the manifest (0 when unlisted: the size check reports that)."""
    return int(manifest.files.get(name, {}).get("size", 0))


def _read_while_loading(objects: list[Saved], world: int) -> set[str]:
    """The per-rank files of collective states whose reader checks a file's checksum while it reads it (FSDP's
    shards), so no file is read twice (see :mod:`.verified_reads`); every other file is checked before any read."""
    return {name for s in objects if s.read is not None and s.checks_while_reading and s.entry.per_rank
            for name in s.entry.files(world) if name not in s.entry.shared_files}


def _read_all(path: str, manifest: Manifest, objects: list[Saved], rank: int,
              world: int) -> tuple[list[Any], dict[str, Expected]]:
    """Check and load every file this rank needs (objects already compared); raises CheckpointError.

    Returns the payloads, and the files whose checksum this rank owes but checks while the collective readers
    read them (absolute path -> the manifest's record)."""
    needed = _needed_files(objects, rank, manifest.world_size)
    main = rank == 0
    # sizes for everything this rank reads (every file on the main process); checksums for this rank's share
    problems = manifest.verify_files(path, sorted(set(needed) | set(manifest.all_files() if main else [])),
                                     checksum=False)
    owed = checked_by(manifest, needed, rank, world)
    later = _read_while_loading(objects, manifest.world_size)
    if not problems:
        problems = manifest.verify_files(path, [name for name in owed if name not in later])
    if problems:
        raise CheckpointError(f"checkpoint {_named(path)!r} is damaged: " + "; ".join(problems))
    # collective readers (FSDP shards) read later, once every rank has validated its files
    payloads = [None if s.read is not None else read_torch(os.path.join(path, s.entry.file.format(rank=rank)))
                for s in objects]
    for saved, payload in zip(objects, payloads, strict=True):
        problems += saved.check(payload)  # a collective reader checks its state while reading
    if problems:
        raise CheckpointError(f"checkpoint {_named(path)!r} does not match this Accelerator: " + "; ".join(problems))
    return payloads, {os.path.join(path, name): manifest.expected(name) for name in owed if name in later}


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
            if not small:  # models or optimizers changed: "nothing was modified" would not be true
                note = (f"{note}; " if undo else "") + (f"the state is partially restored: "
                                                        f"{', '.join(changed + [saved.entry.label()])} changed")
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


def _validate(accelerator: Any, input_dir: str | os.PathLike[str] | None,
              allow_world_size_change: bool) -> tuple[str, Manifest, list[Saved], list[Any], dict[str, Expected]]:
    """Everything one rank checks before the ranks agree: path, manifest, objects, files, payloads."""
    state = accelerator.state
    path = _source(accelerator, input_dir)
    manifest = read_manifest(path)
    objects = collect(accelerator, manifest)
    skipped = PER_RANK_KINDS if allow_world_size_change and manifest.world_size != state.num_processes else ()
    objects = [s for s in objects if s.entry.kind not in skipped]
    if manifest.ranks is not None and state.process_index not in manifest.ranks and not skipped:
        raise CheckpointError(
            f"{_named(path)!r} holds the states of ranks {manifest.ranks} only (the ranks saved into different folders); "
            f"rank {state.process_index} loads the folder it saved into: pass each rank the path its save_state() "
            "returned")
    problems = compare(manifest, objects, state.num_processes, skipped)
    if problems:
        raise CheckpointError(f"checkpoint {_named(path)!r} does not match this Accelerator: " + "; ".join(problems))
    return path, manifest, objects, *_read_all(path, manifest, objects, state.process_index, state.num_processes)


def load_state(accelerator: Any, input_dir: str | os.PathLike[str] | None = None, *,
               allow_world_size_change: bool = False) -> str:
    """Restore the training state saved by :func:`save_state` into ``accelerator``'s prepared objects.

    Restores models, optimizers, schedulers, the GradScaler, every prepared loader's position (the next
    ``iter(loader)`` continues exactly where the saved run was, mid-epoch included), registered objects,
    ``accelerator.step``, and every rank's RNG (restored last). Call it on every rank, after ``prepare`` and
    ``register_for_checkpointing`` with the same objects in the same order as the saving run.

    A checkpoint saved by another number of processes is refused unless ``allow_world_size_change=True``: the
    loaders' positions and the RNG streams are per rank and cannot be mapped onto other ranks, so such a resume
    is not exact. With the option, everything else is restored (FSDP shards resharded by
    ``torch.distributed.checkpoint``; the same checks run first), and the loaders and RNGs keep this run's state.
    With the same number of processes the option changes nothing: everything is restored.

    Args:
        accelerator: the Accelerator to restore into.
        input_dir: the checkpoint directory (after a save into per-rank folders, each rank's own). ``None`` with
            automatic naming: the newest complete
            ``<project_dir>/checkpoints/checkpoint_<n>`` (partial saves are skipped; a complete one a killed commit
            left under a ``.tmp-`` name counts as its number while ``checkpoint_<n>`` is missing), and
            ``project_configuration.iteration`` becomes ``n + 1`` so the next save does not collide.
        allow_world_size_change: load a checkpoint saved by another number of processes, without the per-rank
            states (RNG streams, loader positions).

    Returns:
        The absolute path of the loaded checkpoint.

    Raises:
        CheckpointError: on every rank, before anything is modified, when the checkpoint is missing, partial,
            damaged (missing files, wrong sizes or checksums), or does not match (other world size without
            ``allow_world_size_change``, other number, kind or type of objects, other model keys or shapes).

    Example:
        >>> accelerator.load_state("ckpt")     # doctest: +SKIP
        >>> accelerator.load_state("ckpt", allow_world_size_change=True)  # saved by 2 processes, 1 runs  # doctest: +SKIP
    """
    checked_folder(input_dir, "load_state(input_dir=...)", optional=True)
    if not isinstance(allow_world_size_change, bool):
        raise TypeError(f"load_state(allow_world_size_change={shown(allow_world_size_change)}): pass True or False")
    state = accelerator.state
    world = state.num_processes
    path, manifest, error = "", None, None
    objects: list[Saved] = []
    payloads: list[Any] = []
    owed: dict[str, Expected] = {}
    try:
        path, manifest, objects, payloads, owed = _validate(accelerator, input_dir, allow_world_size_change)
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    found = agree(error, world, "load checkpoint", payload=(path, manifest.save_id if manifest else None))
    _same_save(found)
    manifest = cast(Manifest, manifest)  # no rank failed, so this rank validated
    payloads = read_collective(objects, payloads, manifest, path, world, owed)  # FSDP shards: every rank validated
    error = _apply(objects, payloads)
    agree(error, world, f"load checkpoint {_named(path)!r}")
    if hasattr(accelerator, "step"):
        accelerator.step = manifest.step
    if manifest.iteration is not None and automatic_naming(accelerator):
        newest = complete_checkpoints(checkpoints_root(project_dir_of(accelerator)))
        accelerator.project_configuration.iteration = max([manifest.iteration] + [n for n, _ in newest]) + 1
    if state.is_main_process and is_temporary(os.path.basename(path)):
        _note_left_aside(path)
    return path


def _same_save(found: list[tuple[str, str | None]]) -> None:
    """Every rank loads one checkpoint: one folder, or the folders of one save into per-rank folders."""
    paths = [path for path, _ in found]
    ids = {save_id for _, save_id in found}
    if len(set(paths)) != 1 and (len(ids) != 1 or None in ids):
        raise CheckpointError(f"the ranks resolved different checkpoints {paths}, not the folders of one save; pass "
                              "load_state(input_dir) with the path save_state() returned on each rank.")


def _note_left_aside(path: str) -> None:
    """Say that the loaded checkpoint lies where a killed commit left it, and what puts it back."""
    target = temp_target(os.path.basename(path))
    name = target[0] if target is not None else "its name"
    warnings.warn(f"loaded {_named(path)!r}: a save killed while committing left this complete checkpoint under a temporary "
                  f"name; it stays there (beside any other leftovers of that save) until the next save to {name!r} "
                  "(or, with automatic naming, the next save_state()) puts it back under its name", UserWarning,
                  stacklevel=4)
