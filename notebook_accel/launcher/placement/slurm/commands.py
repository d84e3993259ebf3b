"""What the Slurm placement reads and writes, as plain functions: the ``srun`` command, Slurm's per-node task
counts (``2(x3),1``), each task's identity from its ``SLURM_*`` variables, and the lines a task tells the kernel
through the step's standard output."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.errors import LaunchError, shown

__all__ = ["TaskIdentity", "expand_counts", "task_identity", "srun_command", "start_line", "exit_line", "parse_line",
           "MARK"]

MARK = "notebook-accel-task"  # what the task's own lines on the step's stdout start with
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_counts(text: str) -> list[int]:
    """Slurm's compressed per-node counts as one number per node: ``"2(x2),1"`` -> ``[2, 2, 1]``.

    Raises:
        ValueError: not in Slurm's form.
    """
    counts: list[int] = []
    for part in text.split(","):
        match = _COUNT.match(part.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a Slurm count list such as '2(x3),1'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


@dataclass(frozen=True)
class TaskIdentity:
    """Who a task of the step is: its rank (``SLURM_PROCID``), its index on its node, its node's task count, the
    step's size, its node's name and index, and the step's id (``job.step``)."""

    rank: int
    local_rank: int
    local_world_size: int
    world_size: int
    node: str
    node_index: int
    step: str


def task_identity(variables: Mapping[str, str]) -> TaskIdentity:
    """The task's identity from the ``SLURM_*`` variables srun gives it (ranks are numbered node by node: the step
    is started with ``--distribution=block``).

    Raises:
        LaunchError: a variable is missing or malformed (not started by srun).
    """
    try:
        node_index = int(variables["SLURM_NODEID"])
        counts = expand_counts(variables.get("SLURM_STEP_TASKS_PER_NODE") or variables["SLURM_TASKS_PER_NODE"])
        return TaskIdentity(
            rank=int(variables["SLURM_PROCID"]), local_rank=int(variables["SLURM_LOCALID"]),
            local_world_size=counts[node_index],
            world_size=int(variables.get("SLURM_STEP_NUM_TASKS") or variables["SLURM_NTASKS"]),
            node=variables.get("SLURMD_NODENAME") or f"node {node_index}", node_index=node_index,
            step=f"{variables.get('SLURM_JOB_ID', '?')}.{variables.get('SLURM_STEP_ID', '?')}")
    except (KeyError, ValueError, IndexError) as e:
        raise LaunchError(f"this process does not look like a task of an srun step ({type(e).__name__}: {e}); it "
                          "is started by the Slurm placement, not by hand") from e


def srun_command(cluster: SlurmCluster, job_id: str, tasks: int, name: str, program: Sequence[str]) -> list[str]:
    """The ``srun`` that starts ``tasks`` tasks of ``program`` in job ``job_id``: block distribution (ranks node by
    node), one CPU each (or one GPU each), stdin to every task, Slurm's own messages only, and no retries."""
    command = ["srun", f"--jobid={job_id}", f"--ntasks={tasks}", "--distribution=block", "--input=all",
               f"--job-name={name}", "--kill-on-bad-exit=0", "--quiet", "--overlap"]
    if cluster.nodes is not None:
        command.append(f"--nodes={cluster.nodes}")
    if cluster.uses_gpu:
        command.append("--gpus-per-task=1")
    return [*command, *cluster.extra_args, *program]


def start_line(identity: TaskIdentity, pid: int) -> str:
    """The line a task prints when it starts: its rank, node, pid and step."""
    return f"{MARK} start {identity.rank} {identity.node} {pid} {identity.step}"


def exit_line(rank: int, code: int, node: str) -> str:
    """The line a task prints when its rank's process ended, with its exit code (negative: the signal) and node."""
    return f"{MARK} exit {rank} {code} {node}"


def parse_line(line: str) -> tuple[str, int, list[str]] | None:
    """``("start", rank, [node, pid, step])`` or ``("exit", rank, [code, node])`` from a task's line, else ``None`` (a
    line of srun's own)."""
    parts = line.split()
    if len(parts) < 3 or parts[0] != MARK or parts[1] not in ("start", "exit") or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2]), parts[3:]


def check_fits(tasks: int, cpus_per_node: str, nodes: Sequence[str], job_id: str) -> None:
    """Refuse a run of more tasks than the allocation holds CPUs (``SLURM_JOB_CPUS_PER_NODE``), before srun.

    Raises:
        LaunchError: naming the allocation, its nodes and CPUs, and the fix.
    """
    try:
        cpus = expand_counts(cpus_per_node)
    except ValueError:
        return  # srun says it itself
    if tasks > sum(cpus):
        raise LaunchError(f"num_processes={tasks} is more than Slurm job {job_id} holds: {len(nodes)} node(s) "
                          f"({', '.join(nodes) or '?'}) with {shown(cpus_per_node)} CPUs, one task each at most "
                          f"{sum(cpus)}; use num_processes<={sum(cpus)}, or ask for a bigger allocation")
