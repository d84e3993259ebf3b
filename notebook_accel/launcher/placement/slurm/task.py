"""One task of the Slurm placement's job step (``python -m notebook_accel.launcher.placement.slurm.task``).

It says who it is on its stdout (:func:`.commands.start_line`), imports torch and the worker runtime once when its
step is to be kept warm (``--warm``, as a Ray actor does), then serves runs: it reads each run's payload from its
stdin (srun gives every task the kernel's bytes: the back channel's address and secret, the rendezvous, the launch
environment, the function and each argument pickled once), binds gloo and nccl to the interface it reaches the
kernel through (its node's Slurm network), and forks the rank as a Ray actor forks one
(:mod:`notebook_accel.launcher.placement.remote.rank`'s child: the same back channel, output and worker runtime).
The function and the arguments are unpickled in that child, so the task itself runs no user code and the next run's
child starts from the same clean state. When the rank's process ends it prints its exit code
(:func:`.commands.exit_line`) and waits for the next payload: a kernel that keeps the step warm
(``SlurmCluster(keep_warm=...)``, :mod:`.warm`) sends it there instead of starting a new step. When its stdin ends
(the kernel is gone, or it released or cancelled the step) it kills the rank's process group at once and exits, so
a kernel killed mid-run or between runs leaves no task behind.
"""

from __future__ import annotations

import functools
import importlib
import os
import pickle
import queue
import signal
import struct
import sys
import threading
from dataclasses import replace
from typing import Any, NoReturn

from notebook_accel import environment
from notebook_accel.launcher.placement.remote.interface import interface_toward
from notebook_accel.launcher.placement.remote.rank import SETUP_FAILED, RankSetup, _child
from notebook_accel.launcher.placement.slurm.commands import TaskIdentity, exit_line, start_line, task_identity

__all__ = ["main", "read_payload", "SIZE", "VARIABLES", "SEALING_FIX"]

SIZE = struct.Struct("!Q")
VARIABLES = ("SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID",
             "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_STEP_ID",
             "SLURM_CPUS_PER_TASK")
SEALING_FIX = "pip install 'notebook-accel[slurm]' (it brings it) in the environment the kernel and the tasks run"


def _read_exactly(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError(f"the kernel's payload ended after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def read_payload(fd: int = 0) -> dict[str, Any]:
    """The run's payload from ``fd`` (a length, then the pickled dict of plain values and pickled bytes).

    Raises:
        EOFError: ``fd`` ended (before a payload: the kernel released the step).
    """
    (size,) = SIZE.unpack(_read_exactly(fd, SIZE.size))
    payload: dict[str, Any] = pickle.loads(_read_exactly(fd, size))  # noqa: S301 - the kernel's, through Slurm
    return payload


_interface_toward = functools.lru_cache(maxsize=4)(interface_toward)  # a warm task's next runs have it at once


def _import_runtime(gpu: bool) -> None:
    """Import what every run needs (torch, its distributed package and DDP, the Accelerator; on a CPU task also
    ``torch._dynamo``, which the first DDP imports), once for every run of a warm step; nothing here initialises a
    GPU, which the fork would break."""
    import notebook_accel.accelerator  # noqa: F401
    from notebook_accel.launcher.kernel.warmup import WARM_MODULES

    for name in WARM_MODULES:
        if not (gpu and name == "torch._dynamo"):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a broken optional part of torch: the child imports what it needs
                pass


class _Inbox:
    """The payloads from stdin, read by a daemon thread; at its end, the running rank's process group is killed."""

    def __init__(self) -> None:
        self.payloads: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()
        self.running = 0  # the rank's pid while a run goes
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="notebook-accel-stdin", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                self.payloads.put(read_payload())
        except EOFError:
            self.payloads.put(None)
        except Exception as e:  # noqa: BLE001 - a broken payload: told to the kernel, then the task ends
            self.payloads.put(e)
        with self.lock:
            pid = self.running
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _run(identity: TaskIdentity, payload: dict[str, Any], inbox: _Inbox) -> int:
    """Fork the rank for one run, wait for it; its exit code (after telling the kernel a set-up error)."""
    kernel: tuple[str, int] = tuple(payload["kernel"])
    env = replace(payload["env"], rank=identity.rank, local_rank=identity.local_rank,
                  world_size=identity.world_size, local_world_size=identity.local_world_size)
    interface = _interface_toward(kernel)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        if interface is not None and not environment.get(name):
            environment.set_var(name, interface)
    setup = RankSetup(env, kernel, payload["secret"], int(environment.get("SLURM_CPUS_PER_TASK") or 1),
                      sealing_fix=SEALING_FIX)
    reader, writer = os.pipe()
    parent = os.getpid()
    with inbox.lock:
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            _rank(setup, payload, parent, writer)
        try:
            os.setpgid(pid, pid)  # its own group from now on (the child makes it too): the stdin watch can kill it
        except OSError:
            pass
        inbox.running = pid
    os.close(writer)
    with os.fdopen(reader, "rb") as errors:
        _, status = os.waitpid(pid, 0)
        error = errors.read().decode(errors="replace").strip()
    with inbox.lock:
        inbox.running = 0
    if error:
        print(f"rank {identity.rank} on node {identity.node} could not start: {error}", file=sys.stderr, flush=True)
    return os.waitstatus_to_exitcode(status)


def _rank(setup: RankSetup, payload: dict[str, Any], parent: int, errors: int) -> NoReturn:
    """The rank's child: unpickle the function and the arguments here (user code never runs in the task), then run
    as a Ray actor's child does."""
    try:
        function = pickle.loads(payload["function"])  # noqa: S301
        values = [pickle.loads(value) for value in payload["args"]]  # noqa: S301
    except BaseException as e:  # noqa: BLE001 - told to the task through the error pipe
        try:
            os.write(errors, f"the run could not be read: {type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(SETUP_FAILED)
    _child(setup, function, values, parent, errors)


def main() -> int:
    """Serve runs until stdin ends; 0 (70: a payload could not be read)."""
    identity = task_identity({name: value for name in VARIABLES if (value := environment.get(name)) is not None})
    print(start_line(identity, os.getpid()), flush=True)
    inbox = _Inbox()
    if "--warm" in sys.argv[1:]:  # torch and the runtime once, for every run (a cold step's child imports its own)
        _import_runtime(gpu=bool(environment.get("SLURM_GPUS_PER_TASK")))
    try:
        import cloudpickle  # noqa: F401 - every run's function needs it to be unpickled
    except ImportError:
        pass  # the run's child says so
    while True:
        payload = inbox.payloads.get()
        if payload is None:
            return 0
        if isinstance(payload, BaseException):
            print(f"rank {identity.rank} on node {identity.node} could not read the run: "
                  f"{type(payload).__name__}: {payload}", file=sys.stderr, flush=True)
            print(exit_line(identity.rank, SETUP_FAILED, identity.node), flush=True)
            return SETUP_FAILED
        print(exit_line(identity.rank, _run(identity, payload, inbox), identity.node), flush=True)


if __name__ == "__main__":
    sys.exit(main())
