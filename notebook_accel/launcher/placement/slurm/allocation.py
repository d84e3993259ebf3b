"""An allocation asked for from a login node (no ``SLURM_JOB_ID`` in the kernel): :func:`request_allocation`.

In order, so that a mistake costs nothing on the cluster: ask ``sinfo`` for the partitions and refuse a request that
cannot fit (:func:`.queue.check_request`); start the watchdog (:mod:`.hold`), which submits the job that holds the
allocation and cancels it when the kernel's pipe to it ends; wait while Slurm queues the job, saying
"queued: job 1234 (Resources)" under the cell (the launch's phase, :func:`~notebook_accel.display.phases.current_phase`,
updated as squeue's reason changes) and keeping to the launch's ``timeout=``; once it runs, find its nodes and the
kernel's address on their network. The placement then starts its step in the job as in an allocation the kernel runs
in (``srun --jobid``), and :meth:`HeldAllocation.release` gives the allocation back when the run is over.

Why a held batch job and not ``salloc``: ``sbatch`` answers the job's id at once (the queue's reason can be shown from
the first second, and the id is what a cancel needs), the job needs no process of the kernel's to stay granted, and
its step runs as in the allocations the placement already serves (a batch job's, with ``srun --overlap``).
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.display.phases import LaunchPhase, current_phase
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.remote.interface import address_toward
from notebook_accel.launcher.placement.slurm import hold
from notebook_accel.launcher.placement.slurm.queue import (SINFO_FORMAT, SQUEUE_FORMAT, JobState, check_request,
                                                           job_state, partitions, sbatch_options)
from notebook_accel.launcher.supervision.failures import LaunchTimeoutError

__all__ = ["HeldAllocation", "request_allocation", "POLL_SECONDS"]

POLL_SECONDS = 1.0  # how often squeue is asked while the job waits (the queued line follows within this)
_FIRST_POLL = 0.05
_RELEASE_SECONDS = 20.0


def _client(*args: str) -> subprocess.CompletedProcess[str] | None:
    """A Slurm client command run to its end (``None``: it could not run or took over 20 s)."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None


class HeldAllocation:
    """A job that holds an allocation for this kernel, and its watchdog: :attr:`job_id`, :attr:`nodes` (once it
    runs), :attr:`kernel_host` (the kernel's address on the nodes' network)."""

    def __init__(self, watchdog: subprocess.Popen[bytes]) -> None:
        self.watchdog = watchdog
        self.job_id = ""
        self.nodes: list[str] = []
        self.kernel_host = ""

    def fds(self) -> list[int]:
        """The kernel's ends of the watchdog's pipes (later forks must not hold its stdin open)."""
        pipes = (self.watchdog.stdin, self.watchdog.stdout, self.watchdog.stderr)
        return [p.fileno() for p in pipes if p is not None and not p.closed]

    def release(self) -> None:
        """Give the allocation back: end the watchdog's stdin (it cancels the job) and wait for it; cancel the job
        here if the watchdog does not end. Idempotent."""
        if self.watchdog.stdin is not None and not self.watchdog.stdin.closed:
            try:
                self.watchdog.stdin.close()
            except OSError:
                pass
        try:
            self.watchdog.wait(_RELEASE_SECONDS)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()
            self.watchdog.wait()
            if self.job_id:
                _client("scancel", self.job_id)
        for pipe in (self.watchdog.stdout, self.watchdog.stderr):
            if pipe is not None:
                pipe.close()

    def submit(self) -> None:
        """Read the job's id from the watchdog (it ran sbatch).

        Raises:
            LaunchError: sbatch refused the job, with its words.
        """
        assert self.watchdog.stdout is not None and self.watchdog.stderr is not None
        line = self.watchdog.stdout.readline().decode(errors="replace").strip()
        if not line:
            self.watchdog.wait()
            said = self.watchdog.stderr.read().decode(errors="replace").strip()
            raise LaunchError(f"Slurm refused the allocation (sbatch: {said or 'no message'}); fix the request "
                              "(partition, nodes, gpus_per_node, time, account, extra_args) as its message says")
        self.job_id = line

    def wait_running(self, phase: LaunchPhase | None) -> JobState:
        """Wait until the job runs, saying why it waits on ``phase``'s sink; its state then.

        Raises:
            LaunchError: the job ended first (cancelled by someone, refused by a limit); LaunchTimeoutError: the
                launch's deadline passed while it was queued.
        """
        job, shown, polls = self.job_id, "", 0
        with ExitStack() as stack:
            queued: LaunchPhase | None = None
            while True:
                answer = _client("squeue", "-h", "-j", job, "-o", SQUEUE_FORMAT)
                state = job_state(answer.stdout) if answer is not None and answer.returncode == 0 else None
                if state is not None and state.state == "RUNNING":
                    return state
                if state is not None and not state.waiting:
                    raise LaunchError(f"Slurm job {job} ended before the run could start ({_ended(job, state)}); "
                                      "nothing was run: launch again, or look at the job (scontrol show job "
                                      f"{job}) for what ended it")
                line = state.queued_line(job) if state is not None else shown or f"queued: job {job}"
                if phase is not None and queued is None:
                    queued = stack.enter_context(phase.nested(line, ticking=True))
                elif queued is not None and line != shown:
                    queued.show(line)
                shown = line
                if phase is not None and phase.deadline is not None and time.monotonic() > phase.deadline:
                    raise LaunchTimeoutError(
                        f"the launch's timeout passed while Slurm job {job} was still waiting ({line}); the job was "
                        "cancelled (scancel) and nothing ran. Give a longer timeout=, or ask for less (fewer nodes "
                        "or GPUs, a shorter time=) so that it starts sooner")
                if self.watchdog.poll() is not None:
                    raise LaunchError(f"the watchdog of Slurm job {job} ended (exit code {self.watchdog.returncode}) "
                                      "while the job was queued; the job was cancelled: launch again")
                time.sleep(min(POLL_SECONDS, _FIRST_POLL * 2 ** polls))  # often at first: most jobs start at once
                polls += 1


def _ended(job: str, state: JobState) -> str:
    """How the job ended, as Slurm says it (``scontrol show job``: it outlives squeue's listing for a while)."""
    if state.state:
        return f"{state.state}, {state.reason}"
    answer = _client("scontrol", "show", "job", "-o", job)
    found = re.search(r"JobState=(\S+).*?Reason=(\S+)", answer.stdout if answer is not None else "")
    return f"{found.group(1)}, {found.group(2)}" if found else "squeue no longer lists it"


def _node_address(node: str) -> str:
    """The node's Slurm address (``NodeAddr``), else its name."""
    answer = _client("scontrol", "show", "node", "-o", node)
    found = re.search(r"NodeAddr=(\S+)", answer.stdout if answer is not None else "")
    return found.group(1) if found else node


def request_allocation(cluster: SlurmCluster, tasks: int) -> HeldAllocation:
    """Ask Slurm for an allocation of ``tasks`` tasks as ``cluster`` says, wait until it runs, and return it held.

    Raises:
        LaunchError: the request cannot fit (before anything is queued), sbatch refused it, or the job ended first;
        LaunchTimeoutError: the launch's timeout passed while it was queued. In every case, and on an interrupt
        (the stop button), nothing is left queued.
    """
    answer = _client("sinfo", "-h", "-a", "-N", "-o", SINFO_FORMAT)
    if answer is None or answer.returncode != 0:
        raise LaunchError(f"SlurmCluster(partition={cluster.partition!r}) asks Slurm for an allocation, but sinfo "
                          f"could not be run here ({(answer.stderr.strip() if answer else '') or 'not found'}); run "
                          "the notebook on a login node of the cluster (where sinfo, sbatch and srun work)")
    check_request(cluster, tasks, partitions(answer.stdout))
    name = f"notebook-accel-{secrets.token_hex(4)}"
    watchdog = subprocess.Popen([sys.executable, "-I", str(Path(hold.__file__)), *sbatch_options(cluster, tasks, name)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    held = HeldAllocation(watchdog)
    try:
        held.submit()
        state = held.wait_running(current_phase())
        hosts = _client("scontrol", "show", "hostnames", state.nodelist)
        held.nodes = hosts.stdout.split() if hosts is not None and hosts.returncode == 0 else [state.nodelist]
        held.kernel_host = address_toward(_node_address(held.nodes[0]))
    except BaseException:
        held.release()
        raise
    return held
