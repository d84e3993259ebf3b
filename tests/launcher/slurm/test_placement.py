"""The Slurm placement on the real two-node test Slurm (n1: this host, n2: a network namespace), with the kernel
(this test process) inside an allocation on n1, as a notebook started by salloc or Open OnDemand would be.

What a user relies on: the same training as a local 2-process run, to 1e-6, with ranks on both nodes; refusals
before srun runs; a failing rank as one WorkerError naming the rank and its Slurm node; a timeout leaving no step
and no task process on any node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from notebook_accel.errors import LaunchError
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from notebook_accel.launcher.placement.remote import pickling
from notebook_accel.launcher.supervision.background import RunStoppedError
from tests.distributed import workers
from tests.launcher.recording import RecordingSink
from tests.launcher.slurm.cluster import Allocation, SlurmTestCluster, wait_for

pytestmark = pytest.mark.timeout(300)

# Naming what cannot be pickled loads Ray's pickler when Ray is installed, which sets RAY_CLIENT_MODE for the process:
# load it now, so that no test is seen changing the environment.
pickling._pickler_class()


def _flat(values: object) -> list[float]:
    if isinstance(values, list):
        return [x for v in values for x in _flat(v)]
    return [float(values)]  # type: ignore[arg-type]


def _where() -> tuple[int, int, int, int, str, str]:
    from notebook_accel import environment

    return (int(environment.get("RANK") or -1), int(environment.get("LOCAL_RANK") or -1),
            int(environment.get("WORLD_SIZE") or -1), int(environment.get("LOCAL_WORLD_SIZE") or -1),
            environment.get("SLURMD_NODENAME") or "", environment.get("GLOO_SOCKET_IFNAME") or "")


def _train_and_where(batch: int, accumulation: int, items: int) -> dict[str, object]:
    import torch.distributed as dist

    result = workers.train(batch, accumulation, items)
    places: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(places, _where())
    return {**result, "places": places}


def _fail_on_rank_one() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank one's own failure")
    dist.barrier()


def _sleep() -> None:
    time.sleep(300)


def test_a_run_across_both_nodes_trains_like_two_local_processes(slurm_cluster: SlurmTestCluster,
                                                                 inside: Allocation) -> None:
    on_slurm = notebook_launcher(_train_and_where, args=(2, 1, 24), num_processes=2, cluster="slurm",
                                 dashboard=RecordingSink())
    local = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, dashboard=RecordingSink())
    assert on_slurm["places"] == [(0, 0, 2, 1, "n1", slurm_cluster.interface("n1")),
                                  (1, 0, 2, 1, "n2", slurm_cluster.interface("n2"))]
    assert _flat(on_slurm["params"]) == pytest.approx(_flat(local["params"]), abs=1e-6)
    assert on_slurm["losses"] == pytest.approx(local["losses"], abs=1e-6)


def test_a_failing_rank_is_one_error_naming_the_rank_and_its_node(inside: Allocation) -> None:
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(_fail_on_rank_one, num_processes=2, cluster="slurm", dashboard=RecordingSink())
    text = str(caught.value)
    assert "rank one's own failure" in text and "rank 1" in text and "n2" in text, text


def test_refusals_come_before_srun(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    with pytest.raises(LaunchError, match="more than Slurm job .* holds"):
        notebook_launcher(_sleep, num_processes=5, cluster="slurm", dashboard=RecordingSink())
    with pytest.raises(LaunchError, match="args\\[0\\].*cannot be sent to the Slurm tasks"):
        notebook_launcher(_where, args=(threading.Lock(),), num_processes=2, cluster="slurm",
                          dashboard=RecordingSink())


def test_no_allocation_and_no_partition_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(LaunchError, match="SLURM_JOB_ID is not set"):
        notebook_launcher(_sleep, num_processes=2, cluster="slurm", dashboard=RecordingSink())


def test_a_timeout_cancels_the_step_and_leaves_nothing(inside: Allocation) -> None:
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(_sleep, num_processes=2, cluster="slurm", timeout=8, dashboard=RecordingSink())
    assert time.monotonic() - started < 120  # a generous hang guard


def _both_running(cluster: SlurmTestCluster) -> bool:
    return {t.node for t in cluster.task_processes()} == {"n1", "n2"}


def test_run_stop_cancels_the_step_and_leaves_nothing(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    run = notebook_launcher(_sleep, num_processes=2, cluster="slurm", block=False, dashboard=RecordingSink())
    wait_for(lambda: _both_running(slurm_cluster), 60, "tasks on both nodes")
    run.stop()
    with pytest.raises(RunStoppedError):
        run.result()


def _lose_node(cluster: SlurmTestCluster, request: SlurmCluster, lose: Callable[[], object],
               restore: Callable[[], object]) -> tuple[str, float]:
    """Start a sleeping run on both nodes, lose n2 with ``lose``; the run's error and how long it took to come."""
    run = notebook_launcher(_sleep, num_processes=2, cluster=request, block=False, dashboard=RecordingSink())
    wait_for(lambda: _both_running(cluster), 60, "tasks on both nodes")
    started = time.monotonic()
    lose()
    try:
        with pytest.raises(WorkerError) as caught:
            run.result(timeout=120)
        return str(caught.value), time.monotonic() - started
    finally:
        run.stop()
        restore()


def test_a_node_cut_off_ends_the_run_naming_it(slurm_cluster: SlurmTestCluster, inside: Allocation) -> None:
    text, took = _lose_node(slurm_cluster, SlurmCluster(node_timeout=4), slurm_cluster.cut_link,
                            slurm_cluster.restore_link)
    assert "node n2" in text and "has not answered" in text, text
    assert took < 60, took  # bounded: node_timeout plus the stop's grace (a generous hang guard)


def test_a_node_whose_slurmd_is_killed_ends_the_run_naming_it(slurm_cluster: SlurmTestCluster,
                                                              inside: Allocation) -> None:
    text, took = _lose_node(slurm_cluster, SlurmCluster(), lambda: slurm_cluster.kill_slurmd("n2"),
                            lambda: slurm_cluster.restart_slurmd("n2"))
    assert "Slurm lost node n2" in text, text
    assert took < 90, took  # bounded: Slurm's SlurmdTimeout and its cancel (a generous hang guard)


_KERNEL = """
import time
from notebook_accel.launcher import notebook_launcher
notebook_launcher(time.sleep, args=(300,), num_processes=2, cluster="slurm", dashboard=False)
"""


def test_a_kernel_killed_mid_run_leaves_no_step_and_no_task(slurm_cluster: SlurmTestCluster,
                                                            inside: Allocation) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _both_running(slurm_cluster), 60, "tasks on both nodes")
    finally:
        kernel.kill()
        kernel.wait()
    wait_for(lambda: not slurm_cluster.task_processes(), 30, "the tasks to end after the kernel died")
    wait_for(lambda: [e for e in slurm_cluster.squeue() if e not in (inside.job_id, f"{inside.job_id}.batch")] == [],
             30, "the step to leave the queue")

