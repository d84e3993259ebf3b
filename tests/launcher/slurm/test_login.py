"""The Slurm placement from a login node (this test process with no SLURM_JOB_ID, only the cluster's SLURM_CONF):
``SlurmCluster(partition=...)`` asks the real two-node test Slurm for an allocation, waits in its queue saying why
under the cell, runs the step in it, and gives it back.

What a user relies on: the same training as a local 2-process run, with ranks on both nodes; "queued: job N
(Resources)" while another job holds the nodes; the job gone from squeue after success, failure, stop, timeout (while
running or while queued), a stop while queued, and a kernel SIGKILLed while queued or running; refusals before
anything is queued.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import nullcontext

import pytest

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from notebook_accel.launcher.placement.remote import pickling
from notebook_accel.launcher.supervision.background import RunStoppedError
from tests.distributed import workers
from tests.display.test_phases import PhaseSink
from tests.launcher.recording import RecordingSink
from tests.launcher.slurm.cluster import _LIVE_JOB_STATES, SlurmTestCluster, wait_for
from tests.launcher.slurm.procs import all_procs
from tests.launcher.slurm.test_placement import _both_running, _fail_on_rank_one, _flat, _sleep, _train_and_where

pytestmark = pytest.mark.timeout(300)

pickling._pickler_class()  # as in test_placement.py: Ray's pickler sets RAY_CLIENT_MODE once, not during a test


def _watchdogs() -> list[int]:
    """The allocation watchdogs still running (hold.py), anyone's."""
    return [p.pid for p in all_procs() if "placement/slurm/hold.py" in p.cmdline]


def _ours(cluster: SlurmTestCluster) -> dict[str, str]:
    """Job id -> state of the live jobs (pending, running, completing...) the placement submitted (named
    notebook-accel-...)."""
    out = cluster.slurm("squeue", "-h", "-t", "all", "-o", "%i %j %T").stdout.split()
    return {out[i]: out[i + 2] for i in range(0, len(out), 3)
            if out[i + 1].startswith("notebook-accel-") and out[i + 2] in _LIVE_JOB_STATES}


def _nothing_left(cluster: SlurmTestCluster) -> None:
    wait_for(lambda: not cluster.squeue(), 30, "the queue to be empty", lambda: str(cluster.jobs()))
    wait_for(lambda: not cluster.task_processes(), 20, "task processes to end")
    wait_for(lambda: not _watchdogs(), 20, "the watchdog to end")


@pytest.fixture
def login(slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """This process as a login node: no SLURM_* but the cluster's SLURM_CONF; the request for both nodes. After the
    test: no job in squeue, no task process on either node, no watchdog."""
    for name in [n for n in os.environ if n.startswith("SLURM")]:
        monkeypatch.delenv(name)
    for name, value in slurm_cluster.env.items():
        monkeypatch.setenv(name, value)
    yield SlurmCluster(partition=slurm_cluster.partition, nodes=2, time="0:10:00")
    _nothing_left(slurm_cluster)


def test_a_run_from_a_login_node_trains_like_two_local_processes(slurm_cluster: SlurmTestCluster,
                                                                 login: SlurmCluster) -> None:
    on_slurm = notebook_launcher(_train_and_where, args=(2, 1, 24), num_processes=2, cluster=login,
                                 dashboard=RecordingSink())
    wait_for(lambda: not _ours(slurm_cluster), 20, "the job to leave the queue")  # not at its 10 min time limit
    local = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, dashboard=RecordingSink())
    assert [p[:5] for p in on_slurm["places"]] == [(0, 0, 2, 1, "n1"), (1, 0, 2, 1, "n2")]
    assert _flat(on_slurm["params"]) == pytest.approx(_flat(local["params"]), abs=1e-6)
    assert on_slurm["losses"] == pytest.approx(local["losses"], abs=1e-6)


def test_a_queued_job_says_why_under_the_cell_then_runs(slurm_cluster: SlurmTestCluster,
                                                        login: SlurmCluster) -> None:
    sink = PhaseSink()
    with slurm_cluster.allocation(2) as blocker:  # every CPU of both nodes: the run's job waits for Resources
        def free_when_queued() -> None:
            wait_for(lambda: any(p.startswith("queued: job") and p.endswith("(Resources)") for p in sink.phases), 60,
                     "the queued line")
            slurm_cluster.release(blocker)

        freeing = threading.Thread(target=free_when_queued, daemon=True)
        freeing.start()
        run = notebook_launcher(_sleep, num_processes=2, cluster=login, block=False, dashboard=sink)
        freeing.join()
    job = next(p for p in sink.phases if p.endswith("(Resources)")).split()[2]
    assert job != blocker.job_id and job in _ours(slurm_cluster)
    wait_for(lambda: _both_running(slurm_cluster), 60, "tasks on both nodes")
    run.stop()
    with pytest.raises(RunStoppedError):
        run.result()
    wait_for(lambda: job not in slurm_cluster.squeue(), 20, "the job to leave the queue")


def test_a_failing_rank_gives_the_allocation_back(login: SlurmCluster) -> None:
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(_fail_on_rank_one, num_processes=2, cluster=login, dashboard=RecordingSink())
    assert "rank one's own failure" in str(caught.value) and "n2" in str(caught.value)


def test_a_timeout_while_running_gives_the_allocation_back(login: SlurmCluster) -> None:
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(_sleep, num_processes=2, cluster=login, timeout=8, dashboard=RecordingSink())


def test_a_timeout_while_queued_cancels_the_queued_job(slurm_cluster: SlurmTestCluster,
                                                       login: SlurmCluster) -> None:
    with slurm_cluster.allocation(2):
        with pytest.raises(LaunchTimeoutError, match=r"still waiting \(queued: job \d+ \(Resources\)\)"):
            notebook_launcher(_sleep, num_processes=2, cluster=login, timeout=4, dashboard=RecordingSink())
        wait_for(lambda: not _ours(slurm_cluster), 20, "the run's job to leave the queue")


_KERNEL = """
import sys, time
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.launcher import notebook_launcher
try:
    notebook_launcher(time.sleep, args=(300,), num_processes=2, dashboard=False,
                      cluster=SlurmCluster(partition=sys.argv[1], nodes=2))
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def _kernel(cluster: SlurmTestCluster) -> subprocess.Popen[str]:
    """A kernel on the login node (a child process) launching a sleeping run on both nodes."""
    return subprocess.Popen([sys.executable, "-c", _KERNEL, cluster.partition], env=cluster.client_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _queued(cluster: SlurmTestCluster) -> bool:
    return "PENDING" in _ours(cluster).values()


def test_the_stop_button_while_queued_cancels_the_queued_job(slurm_cluster: SlurmTestCluster,
                                                             login: SlurmCluster) -> None:
    with slurm_cluster.allocation(2):
        kernel = _kernel(slurm_cluster)
        try:
            wait_for(lambda: _queued(slurm_cluster), 60, "the run's job to queue")
            kernel.send_signal(signal.SIGINT)  # what the stop button sends the kernel
            output, _ = kernel.communicate(timeout=60)
        finally:
            kernel.kill()
            kernel.wait()
        assert "interrupted" in output, output
        wait_for(lambda: not _ours(slurm_cluster), 20, "the run's job to leave the queue")


@pytest.mark.parametrize("when", ["queued", "running"])
def test_a_kernel_killed_leaves_no_job_behind(slurm_cluster: SlurmTestCluster, login: SlurmCluster,
                                              when: str) -> None:
    with slurm_cluster.allocation(2) if when == "queued" else nullcontext():
        kernel = _kernel(slurm_cluster)
        try:
            wait_for(lambda: _queued(slurm_cluster) if when == "queued" else _both_running(slurm_cluster), 60,
                     f"the run's job to be {when}")
        finally:
            kernel.kill()
            kernel.wait()
            assert kernel.stdout is not None
            kernel.stdout.close()
        wait_for(lambda: not _ours(slurm_cluster), 30, "the run's job to leave the queue after the kernel died")


def test_requests_that_cannot_fit_are_refused_before_anything_is_queued(slurm_cluster: SlurmTestCluster,
                                                                        login: SlurmCluster) -> None:
    def refused(cluster: SlurmCluster, processes: int, words: str) -> None:
        with pytest.raises(LaunchError, match=words):
            notebook_launcher(_sleep, num_processes=processes, cluster=cluster, dashboard=RecordingSink())
        assert slurm_cluster.squeue() == [] and not _watchdogs()

    part = slurm_cluster.partition
    refused(SlurmCluster(partition="nope"), 2, rf"partition='nope'\) is not a partition.*\['{part}'\]")
    refused(SlurmCluster(partition=part, nodes=3), 3, rf"nodes=3\) is more than partition '{part}' has: 2 nodes")
    refused(SlurmCluster(partition=part), 5, "num_processes=5 is more CPU tasks than partition .* 4 on 2 node")
    if slurm_cluster.gpus_per_node:
        refused(SlurmCluster(partition=part, gpus_per_node=3), 2, "gpus_per_node=3.*more than any node")
    with pytest.raises(LaunchError, match=r"time='1h'\) is not a Slurm time limit"):
        SlurmCluster(partition=part, time="1h")
