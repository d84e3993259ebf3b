"""Warm steps: a Slurm run's job step kept after the run, its tasks waiting for the next launch from this kernel.

A launch in an allocation pays for ``srun`` (a new step: slurmctld, then slurmstepd on each node) and for each task
importing torch: seconds, where a notebook's next launch should take about as long as a local one. With
``SlurmCluster(keep_warm=...)`` (default 300 s, as Ray's) a run whose every rank returned 0 leaves its step here,
each task (torch and the worker runtime imported) waiting on its stdin; the next launch of the same shape (the
allocation, the number of tasks, the cluster's srun options, this Python, its working folder and environment) sends
its payload there instead of starting a step, and each task forks a fresh child for the rank (:mod:`.task`): the
back channel, the secret and the rendezvous store are the new run's, and nothing of the last run is in the child.

A kept step ends (``scancel``; its tasks also exit when their stdin closes) after ``keep_warm`` seconds without a
launch, at a launch of another shape, when the kernel exits (``atexit``; a kernel killed outright closes the
tasks' stdin, and they exit), with :func:`release_slurm_steps`, and at once after a failed or stopped run.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from notebook_accel import environment
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.launcher.kernel.fds import RunDescriptors
from notebook_accel.launcher.placement.remote.keep import Kept
from notebook_accel.launcher.placement.slurm.step import Step

__all__ = ["WarmStep", "shape_of", "take", "keep", "release_slurm_steps", "kept"]


@dataclass
class WarmStep:
    """One run's step, kept for the next launch of the same shape.

    Attributes:
        step: the running ``srun``; ``host``: the kernel's Slurm address it was started for.
        descriptors: the step's pipes, registered while it is kept (a local run forked meanwhile closes them, so
            that only the kernel holds the tasks' stdin open).
    """

    step: Step
    host: str
    descriptors: RunDescriptors = field(default_factory=RunDescriptors)

    def release(self) -> None:
        """End the step (``scancel``, then srun's end); gone already is fine."""
        self.descriptors.close()
        self.step.cancel()


_KEPT: Kept[WarmStep] = Kept()  # ended at the interpreter's exit too


def shape_of(cluster: SlurmCluster, job: str, tasks: int) -> tuple[Any, ...]:
    """What a launch must share with a kept step to use it: the allocation, the tasks, the srun options the cluster
    gives, this interpreter, its working folder, and a digest of the kernel's environment (srun gave the tasks the
    one of the first launch)."""
    digest = hashlib.sha256(repr(sorted(environment.environ_with({}).items())).encode()).hexdigest()
    return (job, tasks, cluster.nodes, cluster.gpus_per_node, tuple(cluster.extra_args), sys.executable,
            os.getcwd(), digest)


def take(shape: tuple[Any, ...]) -> WarmStep | None:
    """The kept step of that shape, now the caller's (``None``: none kept, or it ended meanwhile)."""
    kept_step = _KEPT.take(shape)
    if kept_step is None:
        return None
    kept_step.descriptors.close()
    if not kept_step.step.idle():
        kept_step.release()
        return None
    return kept_step


def keep(shape: tuple[Any, ...], warm: WarmStep, seconds: float) -> None:
    """Keep ``warm`` for the next launch of ``shape`` for ``seconds`` (a step kept for it already ends first)."""
    warm.descriptors = RunDescriptors(sources=[warm.step.fds]).open()
    _KEPT.keep(shape, warm, seconds)


def release_slurm_steps() -> int:
    """End every Slurm job step this kernel keeps warm (``scancel``; their tasks exit) now; how many.

    Example:
        >>> from notebook_accel import release_slurm_steps
        >>> release_slurm_steps()
        0
    """
    return _KEPT.release_all()


def kept() -> list[WarmStep]:
    """The steps kept warm now."""
    return _KEPT.kept()
