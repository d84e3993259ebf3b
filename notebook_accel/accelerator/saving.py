"""What the Accelerator writes outside a checkpoint: ``save`` (one object, by the main process) and the notice
that a checkpoint was saved, which the launcher restarts from (``notebook_launcher(max_restarts=...)``); and the
choice between a blocking ``save_state`` and one written in the background (``async_save``)."""

from __future__ import annotations

from typing import Any

import torch

from notebook_accel.argument_checks import check_writable, checked_save_arguments

__all__ = ["announce_saved", "save_checkpoint", "save_on_main"]


def save_on_main(obj: Any, f: Any, safe_serialization: bool, is_main_process: bool) -> None:
    """``torch.save(obj, f)`` on the main process only; with ``safe_serialization``, a dict of tensors written
    with safetensors instead.

    Raises:
        TypeError / ValueError: a bad argument (checked on every process). OSError: ``f`` cannot be written.
    """
    checked_save_arguments(obj, f, safe_serialization)
    if not is_main_process:
        return
    check_writable(f, "save(f=...)")
    if safe_serialization:
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in obj.items()}, f, metadata={"format": "pt"})
    else:
        torch.save(obj, f)


def announce_saved(process_index: int, path: str, step: int) -> None:
    """Tell the launcher, inside a launched run, that ``path`` is the newest checkpoint (it restarts from it)."""
    from notebook_accel import channel
    from notebook_accel.events import Saved

    writer = channel.current()
    if writer is not None:
        writer.send(Saved(process_index, path, step))


def save_checkpoint(accelerator: Any, output_dir: str | None, async_save: bool | None) -> str:
    """``save_state`` for the Accelerator: blocking, or (``async_save``, default the ProjectConfiguration's) written
    in the background (:mod:`notebook_accel.checkpointing.background`). Either way the launcher hears of the
    checkpoint once it is committed; a background save in flight is waited for first."""
    from notebook_accel import checkpointing
    from notebook_accel.checkpointing import background

    config = accelerator.project_configuration
    chosen = bool(getattr(config, "async_save", False)) if async_save is None else async_save
    if not isinstance(chosen, bool):
        raise TypeError(f"save_state(async_save=...) must be True, False or None (the ProjectConfiguration's "
                        f"async_save), got {chosen!r}")
    step = int(accelerator.step)

    def committed(path: str) -> None:
        if accelerator.is_main_process:  # the launcher restarts from here (max_restarts)
            announce_saved(accelerator.process_index, path, step)

    if chosen:
        return background.save_state_in_background(accelerator, output_dir, on_commit=committed)
    background.wait_for_checkpoint()
    path = checkpointing.save_state(accelerator, output_dir)
    committed(path)
    return path
