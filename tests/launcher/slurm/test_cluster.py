"""The test Slurm cluster itself: two nodes that are two networks, steps across them, a lost node noticed and
brought back, scancel ending tasks on both nodes, and nothing left after, even when the test process is killed.

The placement's tests stand on these; if one of these fails, theirs say nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.launcher.slurm import procs
from tests.launcher.slurm.bringup import ROOT, missing, start_cluster
from tests.launcher.slurm.cluster import MESSAGE_TIMEOUT, NODES, SLURMD_TIMEOUT, SlurmTestCluster, wait_for

pytestmark = pytest.mark.timeout(180)


def test_a_step_runs_a_task_on_each_node_in_its_own_network(slurm_cluster: SlurmTestCluster,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\n[slurm] two-node test cluster up in {slurm_cluster.bringup_s:.2f} s")
    out = slurm_cluster.srun("-N2", "-n2", "-l", "sh", "-c",
                             "echo node=$SLURMD_NODENAME; ip -o -4 addr show | awk '{print \"addr=\" $4}'").stdout
    seen: dict[str, set[str]] = {"0": set(), "1": set()}
    for line in out.splitlines():
        task, _, text = line.partition(": ")
        seen[task.strip()].add(text.strip())
    assert "node=n1" in seen["0"] and "node=n2" in seen["1"], out
    assert f"addr={slurm_cluster.address('n1')}/24" in seen["0"], out
    assert {a for a in seen["1"] if a.startswith("addr=")} == {"addr=127.0.0.1/8",
                                                               f"addr={slurm_cluster.address('n2')}/24"}, out


def test_a_task_on_n2_reaches_n1_only_over_the_veth(slurm_cluster: SlurmTestCluster) -> None:
    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    got: list[tuple[str, bytes]] = []

    def accept() -> None:
        conn, peer = server.accept()
        with conn:
            got.append((peer[0], conn.recv(100)))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    dial = ("import os, socket, sys\n"
            "for host in sys.argv[1:]:\n"
            "    try:\n"
            "        s = socket.create_connection((host, %d), timeout=5)\n"
            "        s.sendall(os.environ['SLURMD_NODENAME'].encode()); s.close(); print(host, 'ok')\n"
            "    except OSError as e:\n"
            "        print(host, type(e).__name__)\n" % port)
    try:
        out = slurm_cluster.srun("-w", "n2", "-N1", "-n1", sys.executable, "-c", dial, "127.0.0.1",
                                 slurm_cluster.address("n1")).stdout
        thread.join(10)
    finally:
        server.close()
    assert out.split("\n")[:2] == ["127.0.0.1 ConnectionRefusedError", f"{slurm_cluster.address('n1')} ok"], out
    assert got == [(slurm_cluster.address("n2"), b"n2")]


def test_an_allocation_gives_a_kernel_its_env_and_steps_number_ranks_node_by_node(
        slurm_cluster: SlurmTestCluster) -> None:
    with slurm_cluster.allocation(2) as held:
        assert held.nodes == ("n1", "n2")
        env = held.env
        assert (env["SLURM_JOB_ID"], env["SLURM_JOB_NODELIST"], env["SLURM_NNODES"]) == (held.job_id, "n[1-2]", "2")
        assert env["SLURMD_NODENAME"] == "n1" and env["SLURM_CONF"] == slurm_cluster.conf
        assert slurm_cluster.squeue() == [held.job_id, f"{held.job_id}.batch"]
        out = slurm_cluster.srun("-n4", "sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME $SLURM_LOCALID",
                                 allocation=held).stdout
        assert sorted(out.splitlines()) == ["0 n1 0", "1 n1 1", "2 n2 0", "3 n2 1"]
        assert slurm_cluster.processes_on("n1") == slurm_cluster.processes_on("n2") == []  # the batch script is none
    assert held.job_id not in slurm_cluster.squeue()


def test_an_salloc_allocation_gives_the_env_of_its_shell_and_ends_with_its_release(
        slurm_cluster: SlurmTestCluster) -> None:
    with slurm_cluster.allocation(2, how="salloc") as held:
        assert (held.env["SLURM_JOB_NODELIST"], held.env["SLURM_NNODES"]) == ("n[1-2]", "2")
        assert "SLURMD_NODENAME" not in held.env and held.env["SLURM_CONF"] == slurm_cluster.conf
        assert slurm_cluster.squeue() == [held.job_id]
        out = slurm_cluster.srun("-n4", "sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME", allocation=held).stdout
        assert sorted(out.splitlines()) == ["0 n1", "1 n1", "2 n2", "3 n2"]
        queued = slurm_cluster.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "true").stdout.strip()
        wait_for(lambda: slurm_cluster.pending_reason(queued) == "Resources", 30.0, "a second job to queue")
        assert slurm_cluster.jobs()[queued] == "PENDING"
    wait_for(lambda: queued not in slurm_cluster.squeue(), 30.0, "the queued job to run once there is room")
    assert held.job_id not in slurm_cluster.squeue()
    assert not [p for p in procs.cluster_procs(slurm_cluster.folder) if p.comm in {"salloc", "sleep"}]


def test_tasks_get_the_stand_in_gpus_slurm_gives_them_and_none_unasked(slurm_cluster: SlurmTestCluster) -> None:
    if slurm_cluster.gpus_per_node < 2:
        pytest.skip("this machine does not let the test cluster make stand-in GPU device files (mknod)")
    show = ("sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none}")
    with slurm_cluster.allocation(2, gpus_per_node=2) as held:
        assert held.env["SLURM_GPUS_ON_NODE"] == "2" and held.env["CUDA_VISIBLE_DEVICES"] == "0,1"
        out = slurm_cluster.srun("-n4", "--gpus-per-task=1", *show, allocation=held).stdout
        assert sorted(out.splitlines()) == ["0 n1 0", "1 n1 1", "2 n2 0", "3 n2 1"]
    with slurm_cluster.allocation(2) as held:
        assert "CUDA_VISIBLE_DEVICES" not in held.env
        assert sorted(slurm_cluster.srun("-n2", "--ntasks-per-node=1", *show, allocation=held).stdout.splitlines()) \
            == ["0 n1 none", "1 n2 none"]


def test_scancel_of_a_step_ends_its_tasks_on_both_nodes(slurm_cluster: SlurmTestCluster) -> None:
    with slurm_cluster.allocation(2) as held:
        step = slurm_cluster.start_srun("-n4", "sleep", "1000", allocation=held, env={"NAS_SMOKE_TASK": "1"})
        try:
            wait_for(lambda: all(len(slurm_cluster.processes_on(n)) == 2 for n in NODES), 30.0, "4 tasks",
                     slurm_cluster.logs)
            assert {t.step for t in slurm_cluster.task_processes()} == {f"{held.job_id}.0"}
            assert len(slurm_cluster.task_processes("NAS_SMOKE_TASK=1")) == 4
            assert f"{held.job_id}.0" in slurm_cluster.squeue()
            slurm_cluster.slurm("scancel", f"{held.job_id}.0")
            wait_for(lambda: not slurm_cluster.task_processes(), 30.0, "the step's tasks to end", slurm_cluster.logs)
            wait_for(lambda: f"{held.job_id}.0" not in slurm_cluster.squeue(), 30.0, "the step to leave squeue")
            assert step.wait(30) != 0
        finally:
            step.kill()
            step.communicate()
        assert slurm_cluster.squeue() == [held.job_id, f"{held.job_id}.batch"]  # the allocation holds


def test_a_killed_slurmd_marks_its_node_lost_ends_its_job_and_a_restart_brings_it_back(
        slurm_cluster: SlurmTestCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """What a lost node looks like from Slurm: NOT_RESPONDING, then DOWN, the step's srun ending and the job ended
    (JobRequeue=0); the tasks on the lost node run on until its slurmd comes back and ends them."""
    with slurm_cluster.allocation(2) as held:
        step = slurm_cluster.start_srun("-n4", "sleep", "1000", allocation=held)
        try:
            wait_for(lambda: all(len(slurm_cluster.processes_on(n)) == 2 for n in NODES), 30.0, "4 tasks",
                     slurm_cluster.logs)
            start = time.monotonic()
            slurm_cluster.kill_slurmd("n2")
            lost = slurm_cluster.wait_node("n2", up=False, timeout=60.0)
            state = slurm_cluster.node_state("n2")
            code = step.wait(60)
            ended = time.monotonic() - start
            wait_for(lambda: held.job_id not in slurm_cluster.squeue(), 60.0, "the job to end", slurm_cluster.logs)
        finally:
            step.kill()
            step.communicate()
        assert code != 0 and slurm_cluster.processes_on("n1") == []
        assert len(slurm_cluster.processes_on("n2")) == 2  # orphans of the dead slurmd, until it comes back
        start = time.monotonic()
        slurm_cluster.restart_slurmd("n2")
        back = time.monotonic() - start
        wait_for(lambda: not slurm_cluster.task_processes(), 30.0, "the restarted slurmd to end the lost job's tasks")
    with capsys.disabled():
        print(f"\n[slurm] slurmd of n2 killed: node {state} after {lost:.1f} s, the step's srun ended (exit {code}) "
              f"after {ended:.1f} s (SlurmdTimeout={SLURMD_TIMEOUT} s, MessageTimeout={MESSAGE_TIMEOUT} s); "
              f"up again {back:.1f} s after the restart")
    assert slurm_cluster.srun("-N2", "-n2", "-l", "hostname").returncode == 0


def test_a_cut_link_marks_n2_lost_and_restoring_it_brings_it_back(slurm_cluster: SlurmTestCluster,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    slurm_cluster.cut_link()
    try:
        lost = slurm_cluster.wait_node("n2", up=False, timeout=90.0)
        unreachable = slurm_cluster.run_on("n2", ["ping", "-c1", "-W1", slurm_cluster.address("n1")])
    finally:
        start = time.monotonic()
        slurm_cluster.restore_link()
    with capsys.disabled():
        print(f"\n[slurm] link of n2 cut: node lost after {lost:.1f} s; up again {time.monotonic() - start:.1f} s "
              "after the link came back")
    assert unreachable.returncode != 0
    assert slurm_cluster.srun("-N2", "-n2", "-l", "hostname").returncode == 0


def _skip_unless_possible() -> None:
    reason = missing()
    if reason is not None:
        pytest.skip(reason)


def _nothing_left(folder: str, tag: int) -> list[str]:
    left = [f"pid {p.pid} {p.comm}" for p in procs.cluster_procs(folder)] + procs.network_left(tag)
    return left + ([folder] if os.path.exists(folder) else [])


def test_the_end_of_a_cluster_leaves_no_process_namespace_or_folder() -> None:
    _skip_unless_possible()
    with start_cluster() as cluster:
        cluster.slurm("sbatch", "-N2", "--exclusive", "-o", "/dev/null", "--wrap", "srun -n4 sleep 1000")
        wait_for(lambda: all(len(cluster.processes_on(n)) == 2 for n in NODES), 60.0, "4 tasks", cluster.logs)
        assert procs.cluster_procs(cluster.folder) and procs.network_left(cluster.tag)
    assert _nothing_left(cluster.folder, cluster.tag) == []


def _orphan() -> tuple[subprocess.Popen[str], dict[str, object]]:
    """Start tests/launcher/slurm/orphan.py and read what it reports once its tasks run."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.launcher.slurm.orphan"], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        proc.communicate()
        raise AssertionError(f"the orphan driver did not start its cluster: {line!r}")
    return proc, json.loads(line[len("READY "):])


def test_a_killed_test_process_leaves_nothing_behind(capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL of the process that owns a cluster: its keeper ends everything, detached step tasks included."""
    _skip_unless_possible()
    proc, info = _orphan()
    folder, tag = str(info["folder"]), int(str(info["tag"]))
    start = time.monotonic()
    proc.kill()
    proc.communicate()
    wait_for(lambda: _nothing_left(folder, tag) == [], 30.0, f"the keeper to end the cluster in {folder}",
             lambda: str(_nothing_left(folder, tag)))
    with capsys.disabled():
        print(f"\n[slurm] test process SIGKILLed: its cluster gone {time.monotonic() - start:.2f} s later")


def test_leftovers_of_a_killed_keeper_are_cleaned_at_the_next_start() -> None:
    """SIGKILL of the owner and its keeper: the daemons die with the keeper (PDEATHSIG); the detached tasks, the
    namespace and the folder stay until ``clean_stale`` (which every bring-up runs first) removes them."""
    _skip_unless_possible()
    proc, info = _orphan()
    folder, tag = str(info["folder"]), int(str(info["tag"]))
    os.kill(int(str(info["keeper"])), signal.SIGKILL)
    proc.kill()
    proc.communicate()
    daemons = {"munged", "slurmctld", "slurmd"}
    wait_for(lambda: not {p.comm for p in procs.cluster_procs(folder)} & daemons, 10.0, "the daemons to die")
    left = procs.cluster_procs(folder)
    assert {p.comm for p in left} >= {"slurmstepd", "sleep"} and procs.network_left(tag) and Path(folder).exists()
    assert folder in procs.clean_stale()
    assert _nothing_left(folder, tag) == []


def test_without_root_or_the_packages_the_tests_skip_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "need root" in str(missing())
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr("shutil.which", lambda name: None if name in {"slurmd", "munged"} else f"/usr/bin/{name}")
    reason = str(missing())
    assert "['munge', 'slurmd']" in reason and "apt-get install" in reason and "dev.py test" in reason
