"""A running two-node test Slurm cluster and what the placement's tests do with it.

Node ``n1`` is this host: its slurmd runs here and its Slurm address (``NodeAddr``) is the host side of the veth,
``10.67.<tag>.1``. Node ``n2`` is the network namespace: its slurmd runs there (``nsenter --net``), its address is
``10.67.<tag>.2``, so srun's tasks on n2 run inside the namespace and reach n1 only over the veth. Each node has 2
CPUs (``CR_CPU``): up to 4 tasks, 2 a node. The client commands find the cluster through ``SLURM_CONF``
(:attr:`SlurmTestCluster.env`); an allocation's environment is the one a kernel inside it (on n1) would have.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tests.launcher.slurm import procs

Node = Literal["n1", "n2"]
Hold = Literal["batch", "salloc"]
NODES: tuple[Node, Node] = ("n1", "n2")
SLURMD_TIMEOUT = 5  # slurm.conf SlurmdTimeout: seconds without an answer before slurmctld may mark a node DOWN
# slurm.conf MessageTimeout (Slurm's default is 10 s): it sets how soon a dead node is noticed -- its slurmd killed,
# NOT_RESPONDING after ~5.5 s and DOWN after ~11 s with 3 s, ~13 s and ~26 s with 10 s
MESSAGE_TIMEOUT = 3
CPUS_PER_NODE = 2  # as many as this 2-core machine has (slurmd would run more tasks than cores all the same)
GPUS_PER_NODE = 2  # stand-ins (see bringup._fake_gpus): a job has them only when it asks (--gpus-per-node...)


@dataclass(frozen=True)
class Allocation:
    """A held allocation: its job id, its nodes, and the environment a kernel running inside it sees
    (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ``SLURM_NNODES``, ... and ``SLURM_CONF``); ``how`` it is held."""

    job_id: str
    nodes: tuple[str, ...]
    env: dict[str, str]
    how: Hold = "batch"

@dataclass(frozen=True)
class TaskProcess:
    """A process of a job step still running on a node."""

    pid: int
    node: str
    step: str
    cmdline: str


@dataclass
class SlurmTestCluster:
    """The running cluster: its folder, network names, addresses, and the keeper that owns its daemons."""

    folder: str
    tag: int
    partition: str
    keeper: subprocess.Popen[str]
    bringup_s: float = 0.0
    gpus_per_node: int = 0
    _daemon_argv: dict[str, list[str]] = field(default_factory=dict)

    @property
    def conf(self) -> str:
        """The path of slurm.conf."""
        return f"{self.folder}/slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a driver needs in its environment to use this cluster: ``{"SLURM_CONF": ...}``."""
        return {"SLURM_CONF": self.conf}

    @property
    def namespace(self) -> str:
        """The network namespace of n2 (``/run/netns/<namespace>``)."""
        return procs.names(self.tag)[0]

    @property
    def host_link(self) -> str:
        """The host side of the veth (n1's interface); :meth:`cut_link` sets it down."""
        return procs.names(self.tag)[1]

    def address(self, node: str) -> str:
        """The node's Slurm address (NodeAddr): n1 ``10.67.<tag>.1`` (host), n2 ``10.67.<tag>.2`` (namespace)."""
        return f"10.67.{self.tag}.{NODES.index(_node(node)) + 1}"

    def interface(self, node: str) -> str:
        """The name of the interface that holds the node's address."""
        return procs.names(self.tag)[1 if _node(node) == "n1" else 2]

    # -- commands ------------------------------------------------------------------------------------------------

    def client_env(self, allocation: Allocation | None = None) -> dict[str, str]:
        """This process's environment less any ``SLURM_*`` (a suite run inside a real Slurm job must not reach
        it), plus :attr:`env` and the allocation's, when given."""
        outside = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        return {**outside, **self.env, **(allocation.env if allocation else {})}

    def slurm(self, *args: str, timeout: float = 30.0, check: bool = True,
              allocation: Allocation | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (``slurm("squeue", "-h")``) against this cluster; raise with its output when
        it fails and ``check``."""
        proc = subprocess.run(list(args), env=self.client_env(allocation), capture_output=True, text=True,
                              timeout=timeout, cwd=self.folder)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}\n{self.logs()}")
        return proc

    def srun(self, *args: str, allocation: Allocation | None = None, timeout: float = 60.0,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """``srun <args>`` to the end (in the allocation when given, else a fresh one); its output as text."""
        return self.slurm("srun", *args, allocation=allocation, timeout=timeout, check=check)

    def start_srun(self, *args: str, allocation: Allocation | None = None,
                   env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``srun <args>`` in the background (output piped); the caller waits for it or kills it."""
        return subprocess.Popen(["srun", *args], env={**self.client_env(allocation), **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.folder)

    def run_on(self, node: str, args: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a command in the node's network (n1: here; n2: inside its namespace), outside Slurm."""
        prefix = [] if _node(node) == "n1" else ["nsenter", f"--net=/run/netns/{self.namespace}"]
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=timeout)

    # -- allocations, queue ----------------------------------------------------------------------------------------

    def allocate(self, nodes: int = 2, *, tasks_per_node: int = CPUS_PER_NODE, gpus_per_node: int = 0,
                 how: Hold = "batch", args: Sequence[str] = (), timeout: float = 60.0) -> Allocation:
        """Hold an allocation of ``nodes`` nodes with room for ``tasks_per_node`` one-CPU tasks (and
        ``gpus_per_node`` stand-in GPUs) on each, and return it once it runs, with the environment of the process
        that holds it (a kernel inside the allocation sees the same):

        - ``how="batch"``: an sbatch job whose script sleeps on n1, as Open OnDemand or batchspawner run a notebook
          server (``SLURMD_NODENAME=n1``, ``SLURM_PROCID``... are set);
        - ``how="salloc"``: ``salloc <options> sleep`` on this host, as ``salloc`` then a notebook server in its
          shell (no ``SLURMD_NODENAME``: the process is in no step).

        ``args``: more sbatch/salloc options (``--no-kill``...). :meth:`release` gives it back."""
        marker = f"hold-{time.monotonic_ns()}"
        env_file = Path(self.folder) / f"{marker}.env"
        script = f"env -0 > {env_file}.part && mv {env_file}.part {env_file} && exec sleep infinity"
        options = [f"-N{nodes}", f"--ntasks-per-node={tasks_per_node}", "-J", marker,
                   *([f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else []), *args]
        if how == "batch":
            self.slurm("sbatch", "-o", f"{self.folder}/{marker}.out", *options, "--wrap", script)
        else:  # the keeper holds salloc: it runs as long as the allocation, and no test may leave a child behind
            self.keeper_call({"start": marker, "argv": ["salloc", *options, "sh", "-c", script],
                          "env": self.client_env()})
        wait_for(env_file.exists, timeout, f"allocation {marker} to start",
                 lambda: f"squeue: {self.jobs()}\n{self.logs()}")
        pairs = (item.partition("=") for item in env_file.read_text().split("\0"))
        env = {k: v for k, _, v in pairs if k.startswith("SLURM") or k in _DEVICE_VARS}
        return Allocation(env["SLURM_JOB_ID"], tuple(self.expand(env["SLURM_JOB_NODELIST"])), env, how)

    @contextmanager
    def allocation(self, nodes: int = 2, *, tasks_per_node: int = CPUS_PER_NODE, gpus_per_node: int = 0,
                   how: Hold = "batch", args: Sequence[str] = ()) -> Iterator[Allocation]:
        """:meth:`allocate`, released on leaving the block."""
        held = self.allocate(nodes, tasks_per_node=tasks_per_node, gpus_per_node=gpus_per_node, how=how, args=args)
        try:
            yield held
        finally:
            self.release(held)

    def release(self, allocation: Allocation | str, timeout: float = 30.0) -> None:
        """``scancel`` the allocation (or any job or step id) and wait until squeue no longer lists it."""
        job = allocation.job_id if isinstance(allocation, Allocation) else allocation
        self.slurm("scancel", job, check=False)
        wait_for(lambda: job not in self.squeue(), timeout, f"job {job} to leave the queue", self.logs)
        if isinstance(allocation, Allocation) and allocation.how == "salloc":
            self.keeper_call({"kill": allocation.env["SLURM_JOB_NAME"]})
            for proc in procs.cluster_procs(self.folder):  # the command salloc ran outlives a SIGKILLed salloc
                if proc.environ.get("SLURM_JOB_ID") == job and "SLURM_STEP_ID" not in proc.environ:
                    procs.kill(proc.pid)

    def squeue(self) -> list[str]:
        """Every job id and step id squeue lists now (``"7"``, ``"7.batch"``, ``"7.0"``), pending and completing
        jobs included."""
        jobs = self.slurm("squeue", "-h", "-t", "all", "-o", "%i %T").stdout.split()
        steps = self.slurm("squeue", "-h", "-s", "-o", "%i").stdout.split()
        listed = [jobs[i] for i in range(0, len(jobs), 2) if jobs[i + 1] in _LIVE_JOB_STATES]
        return listed + steps

    def jobs(self) -> dict[str, str]:
        """Job id -> state (``RUNNING``, ``PENDING``, ``COMPLETING``, ...) of the jobs squeue lists now."""
        out = self.slurm("squeue", "-h", "-o", "%i %T").stdout.split()
        return dict(zip(out[::2], out[1::2]))

    def pending_reason(self, job_id: str) -> str:
        """Why squeue says the job waits (``Resources``, ``Priority``...; ``None`` once it runs, ``""`` when it
        is not listed)."""
        return self.slurm("squeue", "-h", "-j", job_id, "-o", "%r", check=False).stdout.strip()

    def expand(self, hostlist: str) -> list[str]:
        """``n[1-2]`` -> ``["n1", "n2"]`` (scontrol show hostnames)."""
        return self.slurm("scontrol", "show", "hostnames", hostlist).stdout.split()

    # -- nodes -----------------------------------------------------------------------------------------------------

    def node_state(self, node: str) -> str:
        """Slurm's state of the node as scontrol prints it: ``IDLE``, ``ALLOCATED``, ``DOWN+NOT_RESPONDING``..."""
        out = self.slurm("scontrol", "show", "node", "-o", _node(node)).stdout
        match = re.search(r"\bState=(\S+)", out)
        return match.group(1) if match else "UNKNOWN"

    def node_up(self, node: str) -> bool:
        """Whether the node answers and can run jobs (not DOWN, DRAIN or NOT_RESPONDING)."""
        return not re.search(r"DOWN|DRAIN|NOT_RESPONDING|UNKNOWN", self.node_state(node))

    def node_lost(self, node: str) -> bool:
        """Whether slurmctld counts the node as not responding or down."""
        return bool(re.search(r"DOWN|NOT_RESPONDING", self.node_state(node)))

    def wait_node(self, node: str, up: bool, timeout: float = 60.0) -> float:
        """Wait until the node is up (``up``) or lost; return the seconds it took."""
        start = time.monotonic()
        check = (lambda: self.node_up(node)) if up else (lambda: self.node_lost(node))
        wait_for(check, timeout, f"node {node} to be {'up' if up else 'lost'}", self.logs, interval=0.2)
        return time.monotonic() - start

    def kill_slurmd(self, node: str) -> int:
        """SIGKILL the node's slurmd (its running steps' slurmstepd and tasks stay, as on a real crash); return
        its pid."""
        killed = self.keeper_call({"kill": f"slurmd-{_node(node)}"})["killed"]
        if not isinstance(killed, int):
            raise RuntimeError(f"slurmd of {node} is not running")
        return killed

    def restart_slurmd(self, node: str, timeout: float = 60.0) -> None:
        """Start the node's slurmd again (after :meth:`kill_slurmd`, or replacing a live one) and wait until the
        controller counts the node up again."""
        self.start_slurmd(_node(node))
        self.wait_node(node, up=True, timeout=timeout)

    def start_slurmd(self, node: str) -> None:
        """Start the node's slurmd (no wait)."""
        self.keeper_call({"start": f"slurmd-{node}", "argv": self._daemon_argv[f"slurmd-{node}"],
                      "env": self.client_env()})

    def cut_link(self) -> None:
        """Cut n2 off: the veth down, so packets between n1 and n2 are lost (no error, as with a pulled cable)."""
        subprocess.run(["ip", "link", "set", self.host_link, "down"], check=True, capture_output=True)

    def restore_link(self, wait: bool = True, timeout: float = 60.0) -> None:
        """The veth up again; with ``wait``, until both nodes are up in the controller's eyes."""
        subprocess.run(["ip", "link", "set", self.host_link, "up"], check=True, capture_output=True)
        if wait:
            for node in NODES:
                self.wait_node(node, up=True, timeout=timeout)

    # -- processes -------------------------------------------------------------------------------------------------

    def processes_on(self, node: str, marker: str | None = None) -> list[TaskProcess]:
        """The processes of job steps still running on the node: in n2's namespace for n2, in the host's for n1.

        Without ``marker``: every task of a numbered step (``srun``'s, not the batch script that holds an
        allocation) -- a process with ``SLURM_STEP_ID`` and this cluster's ``SLURM_CONF`` in its environment, or a
        descendant of a step's slurmstepd. With ``marker``: every process of the node with ``marker`` in its
        command line or environment, whoever started it, less the Slurm daemons and clients (``srun``...) and
        this process and its parent."""
        netns = self._netns_inode(_node(node))
        every = [p for p in procs.all_procs() if p.netns == netns]
        spared = {os.getpid(), os.getppid()}
        if marker is not None:
            chosen = [p for p in every if p.pid not in spared and p.comm not in procs.DAEMONS | _CLIENTS
                      and (marker in p.cmdline or any(marker in f"{k}={v}" for k, v in p.environ.items()))]
            return [TaskProcess(p.pid, node, p.environ.get("SLURM_STEP_ID", ""), p.cmdline) for p in chosen]
        steps = {p.pid: m.group(1) for p in every
                 if p.comm == "slurmstepd" and p.environ.get(procs.MARK) == self.folder
                 and (m := re.search(r"\[(\d+\.\d+)\]", p.cmdline))}
        parent = {p.pid: p.ppid for p in every}
        found = []
        for p in every:
            step = _step_of(p.pid, parent, steps)
            if p.pid in steps or p.comm in procs.DAEMONS:
                continue
            numbered = p.environ.get("SLURM_STEP_ID", "x").isdigit()
            if step is None and numbered and p.environ.get("SLURM_CONF") == self.conf:
                step = f"{p.environ.get('SLURM_JOB_ID', '?')}.{p.environ['SLURM_STEP_ID']}"
            if step is not None:
                found.append(TaskProcess(p.pid, node, step, p.cmdline))
        return found

    def task_processes(self, marker: str | None = None) -> list[TaskProcess]:
        """:meth:`processes_on` of both nodes."""
        return [t for node in NODES for t in self.processes_on(node, marker)]

    def _netns_inode(self, node: Node) -> int:
        path = "/proc/self/ns/net" if node == "n1" else f"/run/netns/{self.namespace}"
        return os.stat(path).st_ino

    # -- plumbing --------------------------------------------------------------------------------------------------

    def logs(self, lines: int = 25) -> str:
        """The last lines of slurmctld's and each slurmd's log, for failure messages."""
        parts = []
        for name in ("slurmctld.log", "slurmd.n1.log", "slurmd.n2.log", "munged.out"):
            path = Path(self.folder) / name
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(none)"]
            parts.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(parts)

    def keeper_call(self, command: dict[str, object]) -> dict[str, object]:
        """Send the keeper one command (see keeper.py) and return its answer."""
        assert self.keeper.stdin is not None and self.keeper.stdout is not None
        self.keeper.stdin.write(json.dumps(command) + "\n")
        self.keeper.stdin.flush()
        line = self.keeper.stdout.readline()
        if not line:
            raise RuntimeError(f"the cluster's keeper exited (code {self.keeper.poll()})\n{self.logs()}")
        return dict(json.loads(line))

    def stop(self, timeout: float = 60.0) -> list[str]:
        """End the cluster (the keeper kills every process of it, removes the namespace, veth and folder); return
        what is left (empty when all went)."""
        if self.keeper.poll() is None:
            try:
                answer = self.keeper_call({"stop": True})
            except (BrokenPipeError, RuntimeError):
                answer = {"left": []}
            self.keeper.wait(timeout)
        else:
            answer = {"left": procs.end_cluster(self.folder, self.tag)}
        reported = answer.get("left")
        left = [str(item) for item in reported] if isinstance(reported, list) else []
        left += [f"pid {p.pid} ({p.comm})" for p in procs.cluster_procs(self.folder)]
        return left + procs.network_left(self.tag)


_DEVICE_VARS = frozenset({"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"})
_CLIENTS = frozenset({"srun", "salloc", "sbatch", "scancel", "squeue", "scontrol", "sinfo"})
_LIVE_JOB_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                    "SIGNALING", "STAGE_OUT", "STOPPED"}


def _node(node: str) -> Node:
    if node not in NODES:
        raise ValueError(f"node {node!r} is not one of this test cluster's nodes {NODES}")
    return node


def _step_of(pid: int, parent: dict[int, int], steps: dict[int, str]) -> str | None:
    """The step whose slurmstepd ``pid`` descends from, if any."""
    seen = 0
    while pid in parent and seen < 64:
        pid, seen = parent[pid], seen + 1
        if pid in steps:
            return steps[pid]
    return None


def wait_for(check: Callable[[], bool], timeout: float, what: str, logs: Callable[[], str] | None = None,
             interval: float = 0.05) -> None:
    """Poll ``check`` until true; raise naming ``what`` (and the logs) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}\n{logs() if logs else ''}")
        time.sleep(interval)
