"""The one exception type of the checkpointing package."""

from __future__ import annotations

from notebook_accel.errors import NotebookAccelError

__all__ = ["CheckpointError", "ShardSizeError", "UnregistrableError"]


class CheckpointError(NotebookAccelError, RuntimeError):
    """A checkpoint could not be saved or loaded.

    Raised on every rank at once (the ranks agree on the outcome before anyone raises), so a failing save or load
    never leaves one rank waiting at a barrier. The message names the checkpoint path, what went wrong (the OS
    error, the missing file, the mismatching object) and the fix. A failed save leaves the previous checkpoint as
    it was; a failed load raises before any model, optimizer, loader or RNG state is modified.

    Example:
        >>> try:
        ...     raise CheckpointError("no checkpoint in /tmp/run/checkpoints")
        ... except RuntimeError as e:
        ...     print(type(e).__name__)
        CheckpointError
    """


class UnregistrableError(CheckpointError, TypeError):
    """An object given to ``register_for_checkpointing`` has no ``state_dict`` / ``load_state_dict`` method.

    Raised at registration, so the problem shows where the object is registered, not at the first save.
    """


class ShardSizeError(CheckpointError, ValueError):
    """``save_model(max_shard_size=...)`` is not a size (an int in bytes, or a string like ``"5GB"``)."""
