"""``accelerator.profile()``: torch.profiler configured by accelerate's ``ProfileKwargs``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from notebook_accel.kwargs_handlers import ProfileKwargs
from notebook_accel.plugins import ConfigurationError

__all__ = ["build_profiler", "profile_context", "trace_file_name"]

_ACTIVITIES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU"}


def build_profiler(options: ProfileKwargs, device: torch.device) -> Any:
    """The ``torch.profiler.profile`` that ``options`` describe (not started)."""
    names = options.activities if options.activities is not None else (
        ["cpu", "cuda"] if device.type == "cuda" else ["cpu"])
    unknown = [n for n in names if n not in _ACTIVITIES]
    if unknown:
        raise ConfigurationError(f"ProfileKwargs(activities={names!r}): unknown {unknown}; use {list(_ACTIVITIES)}")
    activities = [getattr(torch.profiler.ProfilerActivity, _ACTIVITIES[n]) for n in names]
    schedule = None if options.schedule_option is None else torch.profiler.schedule(**options.schedule_option)
    return torch.profiler.profile(
        activities=activities, schedule=schedule, on_trace_ready=options.on_trace_ready,
        record_shapes=options.record_shapes, profile_memory=options.profile_memory, with_stack=options.with_stack,
        with_flops=options.with_flops, with_modules=options.with_modules,
    )


@contextlib.contextmanager
def profile_context(options: ProfileKwargs | None, device: torch.device, rank: int) -> Iterator[Any]:
    """Profile the block and yield the profiler (call its ``step()`` per iteration when a schedule is set);
    with ``output_trace_dir``, each process writes its Chrome trace there at the end, under accelerate's name
    (:func:`trace_file_name`)."""
    options = options if options is not None else ProfileKwargs()
    with build_profiler(options, device) as profiler:
        yield profiler
    if options.output_trace_dir:
        os.makedirs(options.output_trace_dir, exist_ok=True)
        profiler.export_chrome_trace(os.path.join(os.fspath(options.output_trace_dir), trace_file_name(rank)))


def trace_file_name(rank: int) -> str:
    """The name of process ``rank``'s Chrome trace in ``output_trace_dir``: ``profile_<rank>.json``, as accelerate
    writes it (scripts written for accelerate read it back under that name).

    Example:
        >>> trace_file_name(1)
        'profile_1.json'
    """
    return f"profile_{rank}.json"
