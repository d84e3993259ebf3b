"""Warm Slurm steps (``SlurmCluster(keep_warm=...)``) on the real two-node test Slurm, the kernel (this test
process) inside an allocation on n1.

What a user relies on: the next launch of the same shape reuses the tasks of the last step (the same task processes
on both nodes, no new srun), gives the right result, and sees nothing of the last run (a fresh child per rank, a
new rendezvous); a changed shape, a failed run, the idle time and a killed kernel end the kept step, leaving no step
and no task process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import WorkerError, notebook_launcher
from notebook_accel.launcher.placement.remote import pickling
from notebook_accel.launcher.placement.slurm import warm
from notebook_accel.launcher.supervision.background import RunStoppedError
from tests.distributed import workers
from tests.launcher.recording import RecordingSink
from tests.launcher.slurm.cluster import Allocation, SlurmTestCluster, wait_for

pytestmark = pytest.mark.timeout(300)

# Naming what cannot be pickled loads Ray's pickler when Ray is installed, which sets RAY_CLIENT_MODE for the process
# (and a changed environment is a new shape): load it now.
pickling._pickler_class()

_LEFT = "left_by_the_last_run"


def _who() -> dict[str, object]:
    """Each rank's task (its parent), its own pid, the rendezvous port, and whether a former run's marks are
    here (an environment variable and a module attribute, set now for the next run to look for)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    seen = [os.environ.get("NAS_WARM_MARK"), getattr(sys.modules["os"], _LEFT, None)]
    os.environ["NAS_WARM_MARK"] = "1"
    setattr(sys.modules["os"], _LEFT, True)
    mine = (os.getppid(), os.getpid(), os.environ.get("MASTER_PORT"), seen)
    every: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return {"tasks": [e[0] for e in every], "ranks": [e[1] for e in every],  # type: ignore[index]
            "port": mine[2], "seen": [e[3] for e in every]}  # type: ignore[index]


def _fail() -> None:
    raise ValueError("this run fails")


def _steps(cluster: SlurmTestCluster, held: Allocation) -> list[str]:
    return [e for e in cluster.squeue() if e not in (held.job_id, f"{held.job_id}.batch")]


def test_a_second_run_reuses_the_tasks_and_sees_nothing_of_the_first(slurm_cluster: SlurmTestCluster,
                                                                     inside: Allocation) -> None:
    first = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    step = _steps(slurm_cluster, inside)
    assert len(step) == 1 and len(warm.kept()) == 1  # kept between the runs
    second = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    assert second["tasks"] == first["tasks"]  # the same task processes on both nodes ...
    assert _steps(slurm_cluster, inside) == step  # ... of the same step: no new srun
    assert set(second["ranks"]).isdisjoint(first["ranks"])  # a fresh child per rank
    assert second["port"] != first["port"]  # a new rendezvous store
    assert second["seen"] == [[None, None], [None, None]]  # nothing of the first run's state
    trained = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, cluster="slurm",
                                dashboard=RecordingSink())
    local = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, dashboard=RecordingSink())
    assert trained["losses"] == pytest.approx(local["losses"], abs=1e-6)  # the right result from warm tasks
    assert _steps(slurm_cluster, inside) == step


def test_a_changed_shape_or_keep_warm_0_starts_cold(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    two = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    four = notebook_launcher(_who, num_processes=4, cluster="slurm", dashboard=RecordingSink())
    assert set(four["tasks"]).isdisjoint(two["tasks"])
    assert len(_steps(slurm_cluster, inside)) == 1  # the two-task step ended when the four-task one started
    cold = notebook_launcher(_who, num_processes=4, cluster=SlurmCluster(keep_warm=0), dashboard=RecordingSink())
    assert set(cold["tasks"]).isdisjoint(four["tasks"])
    assert warm.kept() == [] and _steps(slurm_cluster, inside) == []  # keep_warm=0 keeps nothing, ends the rest
    wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")


def test_a_failing_run_ends_the_warm_step(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    first = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    with pytest.raises(WorkerError, match="this run fails"):
        notebook_launcher(_fail, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    assert warm.kept() == []
    wait_for(lambda: not _steps(slurm_cluster, inside), 30, "the failed run's step to leave the queue")
    wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")
    after = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    assert set(after["tasks"]).isdisjoint(first["tasks"])  # cold again


def _sleep() -> None:
    time.sleep(300)


def test_a_stopped_warm_run_ends_the_step(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    first = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    run = notebook_launcher(_sleep, num_processes=2, cluster="slurm", block=False, dashboard=RecordingSink())
    wait_for(lambda: len(slurm_cluster.task_processes()) == 4, 60, "each warm task's rank")  # a task and its rank
    assert {t.pid for t in slurm_cluster.task_processes()} >= set(first["tasks"])  # the warm step runs it
    run.stop()
    with pytest.raises(RunStoppedError):
        run.result()
    assert warm.kept() == []
    wait_for(lambda: not _steps(slurm_cluster, inside), 30, "the stopped run's step to leave the queue")
    wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")


def test_the_idle_time_ends_the_warm_step(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    notebook_launcher(_who, num_processes=2, cluster=SlurmCluster(keep_warm=1), dashboard=RecordingSink())
    wait_for(lambda: not warm.kept() and not _steps(slurm_cluster, inside), 30, "the idle step to end")
    wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")


def test_a_refused_launch_leaves_the_warm_step_usable(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    first = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    with pytest.raises(LaunchError, match="cannot be sent"):
        notebook_launcher(_who, args=(threading.Lock(),), num_processes=2, cluster="slurm",
                          dashboard=RecordingSink())
    again = notebook_launcher(_who, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    assert again["tasks"] == first["tasks"]


_KERNEL = """
import os, sys
from notebook_accel.launcher import notebook_launcher
notebook_launcher(os.getpid, num_processes=2, cluster="slurm", dashboard=False)
print("READY", flush=True)
sys.stdin.readline()  # then exit (its atexit ends the kept step), unless killed first
"""


@pytest.mark.parametrize("end", ["killed", "exits"])
def test_a_kernel_that_ends_while_warm_leaves_no_step_and_no_task(slurm_cluster: SlurmTestCluster,
                                                                  inside: Allocation, end: str) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert kernel.stdout is not None and kernel.stdin is not None
        lines = iter(kernel.stdout.readline, "")  # the launch's header comes first
        if not any(line.strip() == "READY" for line in lines):
            kernel.kill()
            pytest.fail(f"the kernel's launch failed: {kernel.communicate()[1][-3000:]}")
        assert len(slurm_cluster.task_processes()) == 2 and len(_steps(slurm_cluster, inside)) == 1  # kept warm
        if end == "killed":
            kernel.kill()
        else:
            kernel.stdin.write("\n")
            kernel.stdin.flush()
        kernel.wait(60)
    finally:
        kernel.kill()
        kernel.communicate()
    started = time.monotonic()
    wait_for(lambda: not slurm_cluster.task_processes(), 30, "the tasks to end after the kernel ended")
    wait_for(lambda: not _steps(slurm_cluster, inside), 30, "the step to leave the queue")
    assert time.monotonic() - started < 60  # a generous hang guard
