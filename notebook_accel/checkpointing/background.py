"""``save_state(async_save=True)``: snapshot the state, return, and let a writer thread write, fsync and commit it.

The call takes every object's state (as a blocking save does) and copies it into CPU memory (:mod:`.staging`;
pinned where the state is on a GPU), then returns: the training loop goes on while a thread of this process runs
phases 1 to 3 of :func:`~notebook_accel.checkpointing.save.write_and_commit` (the temporary directory, the files
fsynced as they are written with their checksums, the agreement of every rank, the manifest, the rename, the
``total_limit`` pruning), exactly as a blocking save runs them, from the snapshot. The thread runs under
``SCHED_IDLE`` (:data:`WRITER_SCHEDULING`): on CPU the training loop leaves idle, never in its way.

At most one save is in flight per process. The next ``save_state``, ``load_state``, ``wait_for_checkpoint()``,
``end_training()`` and the end of the launched function wait for it; a failed write is raised there, once, naming
the checkpoint (the previous checkpoint is still the latest complete one: nothing was renamed into place).

Agreement from a thread: the writer's collectives (its three agreements, FSDP's DCP planning) run on a gloo group
of their own, created once by every rank together in the first background save (a collective call every rank makes
at the same point of the loop), never on the default group the training loop's collectives use: two threads
issuing collectives on one group would interleave them differently on each rank (:mod:`.writer_group`). The other
choice, agreeing at the next wait point, would leave each checkpoint uncommitted until the next save: a run that
ends or dies in between would lose it. gloo runs on the CPU, so the writer never touches a CUDA stream.

Memory: the snapshot is one extra copy of the state in host memory, kept from one save to the next (a fresh buffer's
first touch costs more than the copy, see :class:`~.staging.StagingPool`) and let go when the launched function
ends. When any rank lacks the memory a new copy needs, every rank falls back to a blocking save (a warning says so
once per process).
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

import torch.distributed as dist

from notebook_accel.argument_checks import checked_folder
from notebook_accel.checkpointing import writer_group
from notebook_accel.checkpointing.agreement import agree, is_distributed
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.objects import collect
from notebook_accel.checkpointing.save import (
    _folders,
    _target,
    error_text,
    project_dir_of,
    save_state,
    write_and_commit,
)
from notebook_accel.checkpointing.staging import StagingPool, stage, state_bytes

__all__ = ["save_state_in_background", "wait_for_checkpoint", "in_flight", "release_buffers", "memory_margin"]


@dataclass
class _Write:
    """The save in flight: its checkpoint, its size, its thread, and how it ended (``error``)."""

    path: str
    size: int
    rank: int
    thread: threading.Thread | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def label(self) -> str:
        """``checkpoint_7 (2.1 GiB)``: the checkpoint's folder name and its size."""
        return f"{os.path.basename(self.path)} ({_size(self.size)})"


# The process's writer state: one save in flight at most (threads belong to the process, and the end of the
# launched function must find it without an Accelerator); the writers' gloo group, kept with the default group
# it was made beside (a new default group, in a later run of the same process, needs a new one).
_LOCK = threading.Lock()
_CURRENT: list[_Write] = []
_GROUP: dict[str, Any] = {}
_SAID: set[str] = set()
_POOL = StagingPool()  # the snapshot's host buffers, kept for the next save until the run ends

memory_margin = 0.9  # a snapshot may use at most this share of the memory available now


def _size(n: int) -> str:
    """``2.1 GiB``, ``572.0 MiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _phase(rank: int, text: str) -> None:
    """Tell the dashboard (or console) what this rank's writer is doing (``""``: nothing any more)."""
    from notebook_accel import channel
    from notebook_accel.events import Phase

    writer = channel.current()
    if writer is not None:
        writer.send(Phase(rank, text, time.time()))


def in_flight() -> str | None:
    """The path of the checkpoint being written in the background by this process, or ``None``."""
    with _LOCK:
        return _CURRENT[0].path if _CURRENT and not _CURRENT[0].done.is_set() else None


def wait_for_checkpoint(reason: str = "") -> str | None:
    """Wait for this process's background save (if any) to be written and committed.

    Args:
        reason: why the caller waits (``"the training function returned"``), shown on the dashboard meanwhile.

    Returns:
        The path of the checkpoint it committed, or ``None`` when none was in flight.

    Raises:
        CheckpointError: the background save failed (on every rank); the message names the checkpoint. Raised
            once: the next call finds nothing in flight.
    """
    with _LOCK:
        write = _CURRENT.pop() if _CURRENT else None
    if write is None:
        return None
    if not write.done.is_set() and reason:
        _phase(write.rank, f"writing {write.label()} in the background; {reason}, waiting for it")
    if write.thread is not None:
        write.thread.join()
    if write.error is not None:
        raise CheckpointError(
            f"the background save of checkpoint {write.path!r} failed: {write.error}. Nothing was committed: the "
            "previous checkpoint is still the latest complete one. Fix the cause (free disk space, a writable "
            "folder) and save again."
        )
    return write.path


def release_buffers() -> None:
    """Let go of the host buffers kept for the next snapshot (the end of the launched function calls it)."""
    _POOL.clear()


def _writer_group(world: int) -> Any:
    """The gloo group the writer threads agree on (made once per default group, by every rank together)."""
    if not is_distributed(world):
        return None
    world_group = dist.group.WORLD
    if _GROUP.get("world") is not world_group:
        _GROUP["group"] = dist.new_group(backend="gloo")
        _GROUP["world"] = world_group
    return _GROUP["group"]


#: How the writer thread gives the CPU to the training loop: ``"idle"`` (Linux's ``SCHED_IDLE``: the writer runs
#: on what the loop's threads leave, about 0.3% of a busy core and all of an idle one), ``"nice"`` (a per-thread nice
#: value :data:`WRITER_NICENESS` above the loop's: about a tenth of a busy core), ``"normal"`` (the loop's own
#: priority). ``"idle"`` falls back to ``"nice"`` where the platform has no ``SCHED_IDLE``.
WRITER_SCHEDULING: Literal["idle", "nice", "normal"] = "idle"
WRITER_NICENESS = 10  # with "nice": how much lower the writer thread's CPU priority is than the training loop's


def _yield_to_training(scheduling: str) -> str:
    """Lower the calling (writer) thread's CPU priority as ``scheduling`` (a :data:`WRITER_SCHEDULING`) says, so that where cores are
    short the training loop runs first and the writer takes what is left (Linux: a thread has its own scheduling
    policy and nice value, and the threads it starts inherit them). Returns the scheduling it got."""
    if scheduling == "normal" or not hasattr(threading, "get_native_id"):
        return "normal"
    tid = threading.get_native_id()
    if scheduling == "idle":
        with contextlib.suppress(AttributeError, OSError):  # no SCHED_IDLE here: a nice value instead
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICENESS))
    except (AttributeError, OSError):  # no per-thread priority here; the write goes on at the usual one
        return "normal"
    return "nice"


def _say_once(key: str, message: str) -> None:
    """Warn with ``message`` the first time ``key`` comes up in this process."""
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _refusal(objects: list[Any]) -> str | None:
    """Why these objects cannot be written in the background, or ``None``."""
    for saved in objects:
        reason = getattr(saved, "background", None)
        if reason:
            return f"{saved.entry.label()}: {reason}"
    return None


def _fits(size: int) -> bool:
    """Whether a snapshot of ``size`` bytes fits in the host memory available now (with :data:`memory_margin`)."""
    from notebook_accel.monitor.host import machine_memory

    available, _ = machine_memory()
    return size <= available * memory_margin


def save_state_in_background(accelerator: Any, output_dir: str | os.PathLike[str] | None = None,
                             on_commit: Callable[[str], None] | None = None) -> str:
    """Snapshot ``accelerator``'s state into CPU memory and write the checkpoint in a background thread.

    Waits for the previous background save first (raising its failure). Called on every rank, like
    :func:`~notebook_accel.checkpointing.save_state`; same arguments, same checkpoint, same guarantees.

    Args:
        accelerator: the Accelerator whose state to save.
        output_dir: as for :func:`~notebook_accel.checkpointing.save_state`.
        on_commit: called with the path once the checkpoint is committed (from the writer thread).

    Returns:
        The absolute path the checkpoint will have once committed (:func:`wait_for_checkpoint` confirms it).

    Raises:
        CheckpointError: the previous background save failed; a state cannot be taken (on every rank); an engine
            whose checkpoint cannot be written from a snapshot (DeepSpeed).
    """
    wait_for_checkpoint()
    checked_folder(output_dir, "save_state(output_dir=...)", optional=True)
    world, rank = accelerator.state.num_processes, accelerator.state.process_index
    objects = collect(accelerator)
    refusal = _refusal(objects)
    if refusal is not None:
        raise CheckpointError(f"save_state(async_save=True) cannot write this state in the background: {refusal}. "
                              "Save with async_save=False (a blocking save).")
    path, iteration = _target(accelerator, output_dir)
    action = f"save checkpoint {path!r} in the background"
    folders = _folders(accelerator, objects, path, world, action)
    main = folders.leaders[rank] == rank
    error: str | None = None
    states: dict[int, Any] = {}
    try:  # what this rank writes: its own files, its collective shards, and (a folder's leader) the shared ones
        states = {i: s.get() for i, s in enumerate(objects) if main or s.entry.per_rank or s.write is not None}
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    size = state_bytes(list(states.values()))
    if not all(agree(error, world, action, payload=_fits(max(0, size - _POOL.free_bytes())))):
        _say_once("memory", f"save_state(async_save=True): a rank lacks the free host memory for the snapshot of "
                  f"its state ({_size(size)} here); saving blocking instead. Free memory, or save with "
                  "async_save=False.")
        path = save_state(accelerator, output_dir)
        if on_commit is not None:
            on_commit(path)
        return path
    group = _writer_group(world)
    snapshot: dict[int, Any] = {}
    try:
        snapshot = stage(states, pool=_POOL)
    except Exception as e:  # the writer's first agreement fails the save on every rank; raised at the next call
        error = error_text(e)
    # the writer reads the step, the folder and total_limit as they are now, not as the loop changes them later
    frozen = SimpleNamespace(state=accelerator.state, step=int(getattr(accelerator, "step", 0) or 0),
                             project_dir=project_dir_of(accelerator),
                             project_configuration=copy.copy(getattr(accelerator, "project_configuration", None)))
    write = _Write(path, size, rank)
    if iteration is not None:  # the next save takes the next number, whatever becomes of this one
        accelerator.project_configuration.iteration = iteration + 1

    scheduling = WRITER_SCHEDULING  # as it is at the call

    def run() -> None:
        _yield_to_training(scheduling)
        _phase(rank, f"writing {write.label()} in the background")
        try:
            with writer_group.using(group):
                write_and_commit(frozen, objects, snapshot, path, iteration, folders, error)
            if on_commit is not None:
                on_commit(path)
        except BaseException as e:  # noqa: BLE001 - raised at the next wait point
            write.error = error_text(e)
        finally:
            snapshot.clear()
            _POOL.give_back()  # the next snapshot copies into these buffers, already mapped
            write.done.set()
            _phase(rank, "")

    write.thread = threading.Thread(target=run, name=f"notebook-accel checkpoint writer {os.path.basename(path)}",
                                    daemon=True)
    with _LOCK:
        _CURRENT.append(write)
    write.thread.start()
    return path
