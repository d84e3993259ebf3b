"""The Slurm request and its registry entry: :class:`SlurmCluster` and :data:`SLURM`.

``notebook_launcher(train, num_processes=N, cluster="slurm")`` in a kernel that runs inside a Slurm allocation
(``SLURM_JOB_ID`` set) starts the workers as one job step (``srun``) across the allocation's nodes, one task per rank;
from a login node, ``cluster=SlurmCluster(partition=...)`` asks Slurm for the allocation first and gives it back at
the end. The placement is :mod:`notebook_accel.launcher.placement.slurm`. Nothing here imports torch or runs a Slurm
command.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from notebook_accel.cluster.registry import PlacementSpec, one_device_each
from notebook_accel.cluster.slurm_time import FORMS, time_minutes
from notebook_accel.errors import LaunchError, shown

__all__ = ["SlurmCluster", "SLURM", "FIELDS"]

FIELDS = ("partition", "nodes", "gpus_per_node", "time", "account", "extra_args", "node_timeout", "keep_warm")


@dataclass(frozen=True)
class SlurmCluster:
    """The Slurm allocation to run the workers in: one task of one job step (``srun``) per rank, ranks numbered node
    by node.

    Args:
        partition: the partition to ask for an allocation from when the kernel is not in one (``None``: use the
            allocation the kernel runs in, ``SLURM_JOB_ID``).
        nodes: nodes to ask for (``None``: as many as the tasks need; in an allocation: its own).
        gpus_per_node: GPUs of each node to use, one per task (``--gpus-per-task=1``; nccl); ``0``: CPU with gloo.
        time: the time limit of an allocation asked for (``"1:00:00"``, one of Slurm's forms); ``account``: the
            account to charge.
        extra_args: more ``srun`` options, e.g. ``("--exclusive",)``; for an allocation asked for, ``sbatch``'s
            too (``--constraint=a100``, ``--qos=...``).
        node_timeout: seconds a task may stay silent (its node lost, its link cut) before the run fails naming its
            node.
        keep_warm: seconds the run's job step (its tasks, torch imported) stays after a run whose every rank
            returned, for the next launch of the same shape from this kernel to skip ``srun`` and the imports;
            ``0``: the step ends with each run. It ends after that long without a launch, at a launch of another
            shape, when the kernel ends, or with :func:`notebook_accel.release_slurm_steps`; a failed or stopped
            run's ends at once.

    Example:
        >>> SlurmCluster(gpus_per_node=4).uses_gpu
        True
    """

    partition: str | None = None
    nodes: int | None = None
    gpus_per_node: int = 0
    time: str | None = None
    account: str | None = None
    extra_args: Sequence[str] = field(default_factory=tuple)
    node_timeout: float = 15.0
    keep_warm: float = 300.0

    def __post_init__(self) -> None:
        for name in ("partition", "time", "account"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()
                                      or any(c.isspace() for c in value)):
                raise LaunchError(f"SlurmCluster({name}={shown(value)}) is not allowed; give a word without spaces "
                                  "(e.g. partition='gpu', time='1:00:00', account='lab') or None")
        if self.time is not None:
            try:
                time_minutes(self.time)
            except ValueError:
                raise LaunchError(f"SlurmCluster(time={self.time!r}) is not a Slurm time limit; give one of Slurm's "
                                  f"forms {', '.join(FORMS)} (e.g. time='1:00:00' for one hour, '2-0' for two "
                                  "days) or 'infinite'") from None
        for name, low in (("nodes", 1), ("gpus_per_node", 0)):
            value = getattr(self, name)
            if (value is not None or name != "nodes") and (
                    isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100_000):
                raise LaunchError(f"SlurmCluster({name}={shown(value)}) is not allowed; give a whole number from "
                                  f"{low} to 100000{' or None' if name == 'nodes' else ''}")
        if isinstance(self.extra_args, str) or not isinstance(self.extra_args, Sequence) \
                or not all(isinstance(a, str) for a in self.extra_args):
            raise LaunchError(f"SlurmCluster(extra_args={shown(self.extra_args)}) is not allowed; give a list of "
                              "srun options, e.g. ['--exclusive', '--constraint=a100']")
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        timeout = self.node_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or not 1.0 <= timeout <= 86400.0:
            raise LaunchError(f"SlurmCluster(node_timeout={shown(timeout)}) is not allowed; give seconds from 1 to "
                              "86400")
        warm = self.keep_warm
        if isinstance(warm, bool) or not isinstance(warm, (int, float)) or not math.isfinite(warm) \
                or not 0.0 <= warm <= 86400.0:
            raise LaunchError(f"SlurmCluster(keep_warm={shown(warm)}) is not allowed; give seconds from 0 (end the "
                              "step after each run) to 86400")

    @property
    def uses_gpu(self) -> bool:
        """Whether each task drives one GPU (nccl) rather than the CPU (gloo)."""
        return self.gpus_per_node > 0

    def describe(self) -> str:
        """``Slurm allocation (the kernel's), CPU tasks``-style words for the header and errors."""
        where = "the kernel's allocation" if self.partition is None else f"partition {self.partition}"
        return f"Slurm ({where}), {'one GPU' if self.uses_gpu else 'the CPU'} per task"


def _devices(cluster: SlurmCluster, num_processes: int, use_cpu: bool | None) -> tuple[list[str], str]:
    """The task's GPU (Slurm's ``CUDA_VISIBLE_DEVICES`` shows it as ``cuda:0``) with nccl, else the CPU with gloo."""
    return one_device_each(cluster, num_processes, use_cpu, "drop use_cpu, or gpus_per_node=0")


def _label(cluster: SlurmCluster) -> str:
    return "Slurm" if cluster.partition is None else f"Slurm partition {cluster.partition}"


def _add_flags(parser: argparse.ArgumentParser) -> None:
    """``--partition``, ``--slurm_nodes``, ``--gpus_per_node``, ``--slurm_time``, ``--account``."""
    parser.add_argument("--partition", default=None, help="Slurm: the partition to ask for an allocation from")
    parser.add_argument("--slurm_nodes", "--slurm-nodes", dest="slurm_nodes", type=int, default=None, metavar="N")
    parser.add_argument("--gpus_per_node", "--gpus-per-node", dest="gpus_per_node", type=int, default=None,
                        metavar="N")
    parser.add_argument("--slurm_time", "--slurm-time", dest="slurm_time", default=None, metavar="TIME")
    parser.add_argument("--account", default=None, help="Slurm: the account to charge")


def _from_flags(base: SlurmCluster | None, args: argparse.Namespace) -> SlurmCluster:
    """The config's Slurm request (or the defaults) overridden by the flags; no step kept warm (a script's launch
    is its process's only one)."""
    fields: dict[str, Any] = {} if base is None else {name: getattr(base, name) for name in FIELDS}
    fields["keep_warm"] = 0.0
    for flag, name in (("partition", "partition"), ("slurm_nodes", "nodes"), ("gpus_per_node", "gpus_per_node"),
                       ("slurm_time", "time"), ("account", "account")):
        if getattr(args, flag, None) is not None:
            fields[name] = getattr(args, flag)
    return SlurmCluster(**fields)


SLURM = PlacementSpec(
    name="slurm", title="Slurm", cluster_class=SlurmCluster, fields=FIELDS,
    placement_path="notebook_accel.launcher.placement.slurm.placement:SlurmPlacement",
    picker_path="notebook_accel.widgets.slurm_section:SlurmSection",
    starting=" as a Slurm job step (srun)",
    devices=_devices, label=_label, add_flags=_add_flags, from_flags=_from_flags,
)
