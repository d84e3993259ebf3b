"""One object of a checkpoint (:class:`Saved`), and what an engine is shown to say how it saves its models
(:class:`CheckpointContext`): the leaf both generic checkpointing and the engines import.

Generic checkpointing (:mod:`.objects`) asks the Accelerator's engine for every model and optimizer; an engine
answers with its own :class:`Saved` (FSDP's sharded layout, DeepSpeed's checkpoint) or ``None`` for a plain
``state_dict`` file. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from notebook_accel.checkpointing.manifest import Entry, Manifest

if TYPE_CHECKING:
    import torch

__all__ = ["CheckpointContext", "Saved"]


@dataclass(frozen=True)
class Saved:
    """One object of a checkpoint: its manifest entry and how to get, check and set its state.

    ``write``/``read``, when given, replace the plain ``torch.save``/``torch.load`` of the entry's file: they are
    collective (every rank calls them with the checkpoint directory), as for FSDP's sharded states.
    ``fixed_world``, when given, says why the state cannot be loaded by another number of processes than saved
    it (DeepSpeed's ZeRO partitions), even with ``allow_world_size_change=True``. ``checks_while_reading``: ``read``
    checks the checksums of its per-rank files while it reads them (FSDP's DCP reader, see
    :mod:`~notebook_accel.checkpointing.verified_reads`), so the load does not hash them first; any other reader
    gets files already checked. ``background``, when given, says why the object cannot be written by a background
    save from a snapshot of its state (DeepSpeed writes from its live engine); such a save is refused.
    """

    entry: Entry
    get: Callable[[], Any]
    check: Callable[[Any], list[str]]
    set: Callable[[Any], None]
    write: Callable[[str, Any], None] | None = None
    read: Callable[[str], Any] | None = None
    fixed_world: str | None = None
    checks_while_reading: bool = False
    background: str | None = None


@dataclass(frozen=True)
class CheckpointContext:
    """The models of one checkpoint, as an engine is asked about them.

    Attributes:
        prepared: the Accelerator's prepared models, as ``prepare`` returned them (an engine's own wrappers).
        models: the same models unwrapped (the user's modules).
        saved: the manifest of the checkpoint being loaded (its files decide their layout); ``None`` when saving.
        shared: what an engine's objects of this one checkpoint share (FSDP: a model's joint state with its
            optimizers), keyed by the engine; empty at first.
    """

    prepared: list[torch.nn.Module]
    models: list[torch.nn.Module]
    saved: Manifest | None = None
    shared: dict[Any, Any] = field(default_factory=dict, compare=False)
