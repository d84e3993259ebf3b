"""A DataLoader's position: where a running epoch is (:class:`Cursor`), and whether a saved position can be resumed
here: the checks :meth:`PreparedDataLoader.load_state_dict` makes before it moves anything (pure: a dict and a few
numbers in, a :class:`DataPrepareError` out).

A position is ``{"epoch", "batches_yielded", "seed", "num_processes"}`` plus, optionally, the samplers' generator
states at the start of the epoch and an iterable dataset's own state (see :mod:`notebook_accel.data.loader`).
"""

from __future__ import annotations

from typing import Any

from notebook_accel.data.sharding import DataPrepareError

__all__ = ["STATE_KEYS", "Cursor", "check_resumable", "check_generator_states"]

STATE_KEYS = ("epoch", "batches_yielded", "seed", "num_processes")


class Cursor:
    """Where a prepared loader's epoch is: ``position``, the batches done (skipped ones included), and
    ``round_real``, the real items of the current batch's round when that round was padded (else ``None``).

    Plain slots: the loader moves it once a batch, and a write to the loader itself goes through DataLoader's own
    ``__setattr__`` check, which costs more than the rest of the loader's per-batch work.
    """

    __slots__ = ("position", "round_real")

    def __init__(self) -> None:
        self.position = 0
        self.round_real: int | None = None


def check_resumable(state: dict[str, Any], num_processes: int, shuffled: bool) -> None:
    """Refuse a ``state`` this loader cannot continue from.

    Args:
        state: a loader's ``state_dict()``.
        num_processes: the processes of this run.
        shuffled: the loader draws its order from generators (so a mid-epoch state needs their saved states).

    Raises:
        DataPrepareError: keys missing, a mid-epoch state saved with another number of processes, or a mid-epoch
            state without the generator states a shuffled loader needs.
    """
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise DataPrepareError(f"loader state is missing {missing}; expected keys {list(STATE_KEYS)}")
    if state["batches_yielded"] and state["num_processes"] != num_processes:
        raise DataPrepareError(
            f"this loader state was saved mid-epoch with {state['num_processes']} processes; resuming with "
            f"{num_processes} would shard the epoch differently. Resume with "
            f"{state['num_processes']} processes, or from a checkpoint taken at an epoch boundary"
        )
    if state["batches_yielded"] and shuffled and state.get("generator_states") is None:
        raise DataPrepareError(
            f"this loader state was saved mid-epoch (epoch {state['epoch']}, {state['batches_yielded']} batches "
            "done) without the shuffle's generator states, so the rest of that epoch cannot be found again: "
            "the batches skipped would not be the ones already trained on. It comes from an older "
            "notebook-accel; resume from a checkpoint taken at an epoch boundary"
        )


def check_generator_states(states: object, generators: int) -> None:
    """Refuse saved generator ``states`` that do not match this loader's ``generators`` (their count).

    Raises:
        DataPrepareError: ``states`` is not a list of one state per generator.
    """
    if not isinstance(states, list) or len(states) != generators:
        count = len(states) if isinstance(states, list) else type(states).__name__
        raise DataPrepareError(
            f"this loader state holds {count} sampler generator states but the loader has "
            f"{generators} generators; it was saved from a DataLoader built differently "
            "(another sampler or shuffle setting). Build the DataLoader as in the run that saved it"
        )
