"""What a login node's kernel asks Slurm before and while it queues for an allocation, as plain functions: the
partitions ``sinfo`` lists (:func:`partitions`), the refusals of a request that cannot fit one
(:func:`check_request`: before anything is queued, naming the bad value, what the partition has and the fix), the
``sbatch`` of the job that holds the allocation (:func:`sbatch_options`), and a job's state and reason as ``squeue``
says them (:func:`job_state`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.cluster.slurm_time import time_minutes
from notebook_accel.errors import LaunchError

__all__ = ["Partition", "SINFO_FORMAT", "SQUEUE_FORMAT", "partitions", "check_request", "sbatch_options",
           "JobState", "job_state", "WAITING"]

SINFO_FORMAT = "%R|%N|%c|%G|%l|%a"  # one line per node and partition: partition, node, CPUs, gres, MaxTime, state
SQUEUE_FORMAT = "%T|%r|%N"  # the job's state, why it waits, its nodes
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED"})
_GPUS = re.compile(r"\bgpu(?::[^:,()]+)?:(\d+)")


@dataclass(frozen=True)
class Partition:
    """A partition as ``sinfo`` lists it: its nodes with their CPUs and GPUs, its time limit in minutes (``None``:
    none) and whether it is up."""

    name: str
    cpus: Mapping[str, int]
    gpus: Mapping[str, int]
    max_minutes: float | None
    up: bool

    def describe(self) -> str:
        """``2 nodes (n1, n2) with 2 CPUs and 0 GPUs each``-style words for the refusals."""
        names = ", ".join(list(self.cpus)[:8]) + (", ..." if len(self.cpus) > 8 else "")

        def each(counts: Mapping[str, int], noun: str) -> str:
            values = sorted(set(counts.values()))
            shown = str(values[0]) if len(values) == 1 else f"{values[0]} to {values[-1]}"
            return f"{shown} {noun}{'' if values == [1] else 's'}"

        return (f"{len(self.cpus)} node{'s' if len(self.cpus) != 1 else ''} ({names}) with {each(self.cpus, 'CPU')} "
                f"and {each(self.gpus, 'GPU')} each")


def partitions(text: str) -> dict[str, Partition]:
    """The partitions in ``sinfo -h -a -N -o`` :data:`SINFO_FORMAT`'s output, by name."""
    rows: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0]:
            rows.setdefault(parts[0], []).append(parts)
    found = {}
    for name, lines in rows.items():
        cpus = {node: int(re.sub(r"\D", "", cpu) or 0) for _, node, cpu, *_ in lines}
        gpus = {node: sum(int(n) for n in _GPUS.findall(gres)) for _, node, _, gres, *_ in lines}
        try:
            limit = time_minutes(lines[0][4])
        except ValueError:
            limit = None
        found[name] = Partition(name, cpus, gpus, limit, lines[0][5].lower() == "up")
    return found


def check_request(cluster: SlurmCluster, tasks: int, known: Mapping[str, Partition]) -> Partition:
    """The partition ``cluster`` asks for, once a ``tasks``-task run fits it.

    Raises:
        LaunchError: the partition is not there or not up, or the run cannot fit it (nodes, GPUs, CPUs, time).
    """
    name = cluster.partition or ""
    part = known.get(name)
    if part is None:
        raise LaunchError(f"SlurmCluster(partition={name!r}) is not a partition of this Slurm; its partitions are "
                          f"{sorted(known) or 'none (sinfo lists none)'}; use one of them (sinfo lists them)")
    if not part.up:
        raise LaunchError(f"partition {name!r} is not up (sinfo says so), so a job would wait for it with no end; "
                          f"use another of {sorted(known)}, or ask the admins")
    nodes, per_node = cluster.nodes, cluster.gpus_per_node
    if nodes is not None and nodes > len(part.cpus):
        raise LaunchError(f"SlurmCluster(nodes={nodes}) is more than partition {name!r} has: {part.describe()}; "
                          f"use nodes<={len(part.cpus)}")
    if nodes is not None and tasks < nodes:
        raise LaunchError(f"num_processes={tasks} is fewer than SlurmCluster(nodes={nodes}): one task a node at "
                          f"least; use num_processes>={nodes}, or nodes<={tasks}")
    if per_node:
        fitting = sum(1 for count in part.gpus.values() if count >= per_node)
        if fitting == 0:
            raise LaunchError(f"SlurmCluster(gpus_per_node={per_node}) is more than any node of partition {name!r} "
                              f"has: {part.describe()}; use gpus_per_node<={max(part.gpus.values())}, or a "
                              "partition with GPUs")
        room = per_node * min(fitting, nodes or fitting)
        if tasks > room:
            raise LaunchError(f"num_processes={tasks} needs {tasks} GPUs, one a task, but {min(fitting, nodes or fitting)}"
                              f" node(s) x gpus_per_node={per_node} give {room} (partition {name!r}: "
                              f"{part.describe()}); use num_processes<={room}, or more nodes")
    else:
        room = sum(sorted(part.cpus.values(), reverse=True)[:nodes or len(part.cpus)])
        if tasks > room:
            raise LaunchError(f"num_processes={tasks} is more CPU tasks than partition {name!r} has CPUs for "
                              f"({part.describe()}: {room} on {nodes or len(part.cpus)} node(s)); use num_processes"
                              f"<={room}, more nodes, or gpus_per_node")
    wanted = None if cluster.time is None else time_minutes(cluster.time)  # no time=: the partition's default
    if part.max_minutes is not None and cluster.time is not None and (wanted is None or wanted > part.max_minutes):
        raise LaunchError(f"SlurmCluster(time={cluster.time!r}) is longer than partition {name!r} allows "
                          f"({_minutes(part.max_minutes)}); use time<={_minutes(part.max_minutes)!r}")
    return part


def _minutes(minutes: float) -> str:
    """Minutes in Slurm's ``D-HH:MM:SS``/``HH:MM:SS`` form."""
    seconds = int(round(minutes * 60))
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def sbatch_options(cluster: SlurmCluster, tasks: int, name: str) -> list[str]:
    """The ``sbatch`` options of the job that holds the allocation: ``tasks`` tasks of one CPU (or one GPU) each on
    the partition, its name, no output file, never requeued; its script only waits (:mod:`.hold`)."""
    options = ["--parsable", f"--job-name={name}", "--output=/dev/null", "--no-requeue",
               f"--partition={cluster.partition}", f"--ntasks={tasks}"]
    if cluster.nodes is not None:
        options.append(f"--nodes={cluster.nodes}")
    if cluster.gpus_per_node:
        options.append(f"--gpus-per-node={cluster.gpus_per_node}")
    options += [f"--time={cluster.time}"] if cluster.time else []
    options += [f"--account={cluster.account}"] if cluster.account else []
    return [*options, *cluster.extra_args, "--wrap=exec sleep infinity"]


@dataclass(frozen=True)
class JobState:
    """A job as ``squeue`` shows it: its state (``""``: squeue does not list it), why it waits, its node list."""

    state: str
    reason: str
    nodelist: str

    @property
    def waiting(self) -> bool:
        """Whether it has not started yet (pending, or its nodes are booting)."""
        return self.state in WAITING

    def queued_line(self, job_id: str) -> str:
        """``queued: job 1234 (Resources)``: what the cell says while the job waits."""
        why = self.reason if self.reason and self.reason != "None" else self.state.lower()
        return f"queued: job {job_id} ({why})"


def job_state(output: str) -> JobState:
    """The job in ``squeue -h -j ID -o`` :data:`SQUEUE_FORMAT`'s output (a job not listed: ``state=""``)."""
    line = output.strip().splitlines()[0] if output.strip() else ""
    state, _, rest = line.partition("|")
    reason, _, nodelist = rest.partition("|")
    return JobState(state.strip(), reason.strip(), nodelist.strip())

