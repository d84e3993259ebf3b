"""What the Accelerator writes outside a checkpoint: ``save`` (one object, by the main process) and the notice
that a checkpoint was saved, which the launcher restarts from (``notebook_launcher(max_restarts=...)``)."""

from __future__ import annotations

from typing import Any

import torch

from notebook_accel.argument_checks import check_writable, checked_save_arguments

__all__ = ["announce_saved", "save_on_main"]


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
