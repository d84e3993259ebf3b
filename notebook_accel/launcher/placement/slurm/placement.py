"""The Slurm placement (a :class:`~notebook_accel.launcher.placement.protocol.Placement`): one ``srun`` task per rank.

:meth:`SlurmPlacement.start`, in order, so that a mistake costs nothing on the cluster: find the allocation the kernel
runs in (refused without one), refuse a run bigger than it, pickle the function and each argument once (one that
cannot be pickled is named before srun runs), open the back channel and the rendezvous store on the kernel's Slurm
address, start the step with the payload on its stdin, wait for every task to say where it runs, then accept each
rank's four back-channel streams. The watch, the handles and the streams are the remote placements' shared ones
(:mod:`notebook_accel.launcher.placement.remote`); only where a rank's exit code comes from, and the words about a
node, are Slurm's (:class:`SlurmResults`).
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable

from notebook_accel import environment
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import LaunchError, shown
from notebook_accel.launcher.kernel.fds import RunDescriptors
from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle, accept_streams
from notebook_accel.launcher.placement.remote.link import BackChannel
from notebook_accel.launcher.placement.remote.payload import pickle_each
from notebook_accel.launcher.placement.remote.rank import require_sealing
from notebook_accel.launcher.placement.remote.sampler import RemoteSampler
from notebook_accel.launcher.placement.remote.watch import RunWatch
from notebook_accel.launcher.placement.slurm import warm
from notebook_accel.launcher.placement.slurm.allocation import HeldAllocation, request_allocation
from notebook_accel.launcher.placement.slurm.commands import check_fits, srun_command
from notebook_accel.launcher.placement.slurm.results import SlurmResults
from notebook_accel.launcher.placement.slurm.step import Step, StepEnded, task_program
from notebook_accel.launcher.placement.slurm.task import SEALING_FIX, SIZE
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.rendezvous.store import StoreServer, bind_listener
from notebook_accel.monitor.board import SystemBoard

__all__ = ["SlurmPlacement", "CONNECT_SECONDS", "kernel_address"]

CONNECT_SECONDS = 120.0  # from srun's start to every rank's four streams (a cold node imports torch first)


def _slurm(*args: str) -> str:
    """A Slurm client command's output ("" when it fails)."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def kernel_address() -> str:
    """The kernel's address on the Slurm network: its node's ``NodeAddr`` (else its host name's address).

    Raises:
        LaunchError: neither can be found.
    """
    node = environment.get("SLURMD_NODENAME") or ""
    if node:
        found = re.search(r"NodeAddr=(\S+)", _slurm("scontrol", "show", "node", "-o", node))
        if found:
            return found.group(1)
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as e:
        raise LaunchError(f"the address of this kernel's node {shown(node)} could not be found ({e}); run the kernel "
                          "on a node of the allocation") from e


@functools.lru_cache(maxsize=4)
def _address(job: str) -> str:
    """:func:`kernel_address`, asked of Slurm once per allocation."""
    return kernel_address()


def _payload(env: LaunchEnvironment, kernel: tuple[str, int], secret: bytes, function: Callable[..., Any],
             args: tuple[Any, ...]) -> bytes:
    """The length-prefixed payload of every task; what cannot be pickled is named in one line."""
    try:
        import cloudpickle
    except ImportError as e:
        raise LaunchError("cluster='slurm' sends the function to the tasks with cloudpickle, which this kernel "
                          "lacks: pip install 'notebook-accel[slurm]'") from e
    function_bytes, values = pickle_each(cloudpickle.dumps, function, args, "the Slurm tasks")
    body = pickle.dumps({"env": env, "kernel": kernel, "secret": secret, "function": function_bytes,
                         "args": values})
    return SIZE.pack(len(body)) + body


class SlurmPlacement:
    """Run the workers as the tasks of one ``srun`` step in the kernel's Slurm allocation.

    Args:
        cluster: the request; ``descriptors``: the run's registered descriptors (later local forks close the
            step's); ``restart_after``: when this attempt is a restart (``max_restarts``), the failure it follows (a
            restart is a new step in the same allocation; one that cannot start names it).
    """

    def __init__(self, cluster: SlurmCluster, descriptors: RunDescriptors | None = None,
                 restart_after: str = "") -> None:
        self.cluster = cluster
        self.descriptors = descriptors
        self.restart_after = restart_after
        self.step: Step | None = None
        self.store: StoreServer | None = None
        self.channel: BackChannel | None = None
        self.watch: RunWatch | None = None
        self.handles: list[RemoteWorkerHandle] = []
        self.held: HeldAllocation | None = None  # the allocation asked for from a login node
        self.shape: tuple[Any, ...] = ()
        self.host = ""

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        """Start one task per environment, or give the run to the tasks of a step kept warm (:mod:`.warm`);
        ``board`` is not used (the trackers read no figures across nodes)."""
        job = self._allocation(len(envs))
        self.shape = warm.shape_of(self.cluster, job, len(envs))
        try:
            self.host = self.held.kernel_host if self.held is not None else _address(job)
            self.channel = BackChannel(self.host)
            listener = bind_listener(self.host, 0)
            self.store = StoreServer(listener, len(envs))
            self.store.start()
            env = replace(envs[0], master_addr=self.host, master_port=int(self.store.port),
                          extra_vars=(*envs[0].extra_vars, ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                                      ("TORCHELASTIC_RESTART_COUNT", "0")))
            payload = _payload(env, self.channel.address, self.channel.secret, function, args)
            self.step = self._warm_step(payload)
            if self.step is None:  # nothing kept warm of this shape: a new step
                warm.release_slurm_steps()  # a step kept for another shape holds the tasks' CPUs, GPUs and memory
                name = f"notebook-accel-{hashlib.sha256(self.channel.secret).hexdigest()[:8]}"
                self.step = Step(srun_command(self.cluster, job, len(envs), name,
                                             task_program(self.cluster.keep_warm > 0)), payload)
            if self.descriptors is not None:
                self.descriptors.sources.append(
                    lambda: [*(fd for h in self.handles for fd in h.open_fds()), *(self.step.fds() if self.step else []),
                             *(self.held.fds() if self.held else [])])
            self._make_handles(envs)
            self._accept()  # while the tasks start: each says where it runs before it dials
            try:
                self.step.wait_started(len(envs), time.monotonic() + CONNECT_SECONDS)
            except RuntimeError:
                pass  # srun ended with every rank connected (a rank that failed at once): its node is told below
            for handle in self.handles:
                handle.node, handle.pid = self.step.started.get(handle.rank, ("?", -1))
                handle.node_id = handle.node
        except (RuntimeError, TimeoutError) as e:
            self.release(self.handles)
            again = (f" (the restart after {self.restart_after}: the allocation must still hold its nodes, see "
                     f"squeue -j {job})") if self.restart_after else ""
            raise LaunchError(f"the Slurm step in job {job} could not start{again}: {e}") from e
        except BaseException:
            self.release(self.handles)
            raise
        self.watch = RunWatch(SlurmResults(self.step), self.handles, self.cluster.node_timeout)
        self.watch.start()
        return list(self.handles)

    def _warm_step(self, payload: bytes) -> Step | None:
        """The step a run of this shape left warm, given ``payload`` (``None``: none kept, ``keep_warm`` is 0, an
        allocation asked for from a login node (given back at the run's end), or it ended meanwhile, then released)."""
        if self.cluster.keep_warm <= 0 or self.held is not None:
            return None
        kept = warm.take(self.shape)
        if kept is None:
            return None
        if kept.host != self.host or not kept.step.send(payload):
            kept.release()
            return None
        return kept.step

    def _allocation(self, count: int) -> str:
        """The kernel's allocation (its job id), checked to hold ``count`` tasks, before anything starts."""
        job = environment.get("SLURM_JOB_ID") or ""
        if not job and self.cluster.partition is None:
            raise LaunchError("cluster='slurm' runs the workers in the Slurm allocation this kernel runs in, but "
                              "SLURM_JOB_ID is not set here; start the notebook inside an allocation (salloc, "
                              "sbatch, Open OnDemand), or name one to ask for: SlurmCluster(partition='...')")
        if count > 1:
            try:
                require_sealing("this kernel", SEALING_FIX)
            except ImportError as e:
                raise LaunchError(str(e)) from e
        if not job:  # a login node: ask for one (queued, said under the cell), given back by release()
            self.held = request_allocation(self.cluster, count)
            return self.held.job_id
        nodes = (environment.get("SLURM_JOB_NODELIST") or "").split(",")
        check_fits(count, environment.get("SLURM_JOB_CPUS_PER_NODE") or "", nodes, job)
        return job

    def _make_handles(self, envs: Sequence[LaunchEnvironment]) -> None:
        assert self.step is not None
        for rank in range(len(envs)):
            node, pid = self.step.started.get(rank, ("?", -1))  # known once its task says it (after _accept)
            self.handles.append(RemoteWorkerHandle.create(rank, envs[rank].device or "cpu", pid, node, ref=rank,
                                                          node_id=node))

    def _accept(self) -> None:
        """Every rank's four streams; a task that ended first (its rank could not start) fails the launch."""
        assert self.channel is not None and self.step is not None
        step = self.step

        def alive() -> None:
            for handle in (h for h in self.handles if not h.connected):  # a connected rank may end: it ran
                node = step.started.get(handle.rank, ("?", -1))[0]
                try:
                    code = step.code(handle.rank)
                except StepEnded as e:
                    raise LaunchError(f"rank {handle.rank} on node {node} could not start: {e}") from None
                if code is not None:
                    raise LaunchError(f"rank {handle.rank} on node {node} could not start: {step.messages()}")

        try:
            accept_streams(self.channel, self.handles, time.monotonic() + CONNECT_SECONDS, alive)
        except TimeoutError as e:
            raise LaunchError(f"the Slurm tasks did not connect back to this kernel at {self.channel.address[0]}:"
                              f"{self.channel.address[1]} within {CONNECT_SECONDS:.0f} s ({e})") from e
        finally:
            self.channel.close()

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        """Send ``sig`` to the rank's process group; SIGKILL also cancels the step (a lost node cannot obey)."""
        if not isinstance(handle, RemoteWorkerHandle):
            return
        handle.send_signal(sig)
        if sig == signal.SIGKILL and self.step is not None:
            self.step.cancel()

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        """Nothing: :meth:`release` cancels the step, which ends every task on every node."""

    def sampler(self, handles: Sequence[WorkerHandle]) -> RemoteSampler | None:
        """The figures each rank's node sends (``None`` before the start)."""
        return None if self.watch is None else RemoteSampler(self.watch)

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        """Keep the step warm for the next launch when every rank returned 0 (and ``keep_warm`` asks for it), else
        end it (cancelled when a task is still running); end the store and the streams. Idempotent."""
        for handle in self.handles:
            if not handle.ended.is_set():
                handle.send_signal(signal.SIGKILL)
        if self.step is not None and self.held is None and self.cluster.keep_warm > 0 and self.handles \
                and len(self.step.codes) == len(self.handles) and self.step.idle():  # (asked for: given back below)
            warm.keep(self.shape, warm.WarmStep(self.step, self.host), self.cluster.keep_warm)
            self.step = None
        if self.step is not None:
            if len(self.step.codes) < len(self.handles) or not self.handles:
                self.step.cancel()
            else:
                self.step.close()
        if self.watch is not None:
            self.watch.stop()
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.channel is not None:
            self.channel.close()
        for handle in self.handles:
            handle.end(-int(handle.signalled or signal.SIGKILL))
            handle.reap()
            handle.close_streams()
        if self.held is not None:
            self.held.release()
