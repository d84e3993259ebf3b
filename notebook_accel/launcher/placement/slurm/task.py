"""One task of the Slurm placement's job step (``python -m notebook_accel.launcher.placement.slurm.task``).

It reads the run's payload from its stdin (srun gives every task the kernel's bytes: the back channel's address and
secret, the rendezvous, the launch environment, the function and each argument pickled once), says who it is on its
stdout (:func:`.commands.start_line`), binds gloo and nccl to the interface it reaches the kernel through (its node's
Slurm network), and forks the rank as a Ray actor forks one
(:func:`notebook_accel.launcher.placement.remote.rank.fork_rank`: the same back channel, output and worker runtime).
When the rank's process ends it prints its exit code (:func:`.commands.exit_line`). If its stdin ends first (the kernel
is gone, or it cancelled the run) it kills the rank's process group at once, so a kernel killed mid-run leaves no task
behind.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
from dataclasses import replace
from typing import Any

from notebook_accel import environment
from notebook_accel.launcher.placement.remote.interface import interface_toward
from notebook_accel.launcher.placement.remote.rank import SETUP_FAILED, RankSetup, fork_rank
from notebook_accel.launcher.placement.slurm.commands import exit_line, start_line, task_identity

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
    """The run's payload from ``fd`` (a length, then the pickled dict)."""
    (size,) = SIZE.unpack(_read_exactly(fd, SIZE.size))
    payload: dict[str, Any] = pickle.loads(_read_exactly(fd, size))  # noqa: S301 - the kernel's, through Slurm
    return payload


def _kill_on_eof(pid: int) -> None:
    """Kill the rank's process group when the kernel's stdin ends (a daemon thread)."""
    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass

    threading.Thread(target=watch, name="notebook-accel-stdin", daemon=True).start()


def main() -> int:
    """Run this task's rank; its exit code (70: it could not be set up)."""
    identity = task_identity({name: value for name in VARIABLES if (value := environment.get(name)) is not None})
    print(start_line(identity, os.getpid()), flush=True)
    rank = identity.rank
    try:
        payload = read_payload()
        function = pickle.loads(payload["function"])  # noqa: S301
        values = [pickle.loads(value) for value in payload["args"]]  # noqa: S301
    except Exception as e:  # noqa: BLE001 - told to the kernel through srun's stderr, with the exit line
        print(f"rank {rank} on node {identity.node} could not read the run: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        print(exit_line(rank, SETUP_FAILED, identity.node), flush=True)
        return SETUP_FAILED
    kernel: tuple[str, int] = tuple(payload["kernel"])
    env = replace(payload["env"], rank=rank, local_rank=identity.local_rank, world_size=identity.world_size,
                  local_world_size=identity.local_world_size)
    interface = interface_toward(kernel)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        if interface is not None and not environment.get(name):
            environment.set_var(name, interface)
    threads = int(environment.get("SLURM_CPUS_PER_TASK") or 1)
    setup = RankSetup(env, kernel, payload["secret"], threads, sealing_fix=SEALING_FIX)
    code, error = fork_rank(setup, function, values, forked=_kill_on_eof)
    if error:
        print(f"rank {rank} on node {identity.node} could not start: {error}", file=sys.stderr, flush=True)
    print(exit_line(rank, code, identity.node), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
