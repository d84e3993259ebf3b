"""The Slurm placement's parts without Slurm: the request's checks and forms, the srun command, Slurm's count lists,
each task's identity from its SLURM_* variables, the lines a task prints, and the allocation-size refusal."""

from __future__ import annotations

import argparse

import pytest

from notebook_accel.cluster import check_cluster, cluster_devices, cluster_label
from notebook_accel.cluster.registry import add_cluster_flags, cluster_from_flags
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.config import Config
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.slurm.commands import (check_fits, exit_line, expand_counts, parse_line,
                                                              srun_command, start_line, task_identity)


def test_the_forms_of_a_slurm_cluster_and_its_refusals() -> None:
    assert check_cluster("slurm") == SlurmCluster()
    assert check_cluster({"kind": "slurm", "gpus_per_node": 4, "extra_args": ["--exclusive"]}) == SlurmCluster(
        gpus_per_node=4, extra_args=("--exclusive",))
    assert Config(extra={"cluster": {"kind": "slurm", "partition": "gpu"}}).cluster == SlurmCluster(partition="gpu")
    assert check_cluster({"kind": "slurm", "keep_warm": 60}) == SlurmCluster(keep_warm=60.0)
    assert cluster_label(SlurmCluster()) == "Slurm" and cluster_label(SlurmCluster(partition="gpu")) == \
        "Slurm partition gpu"
    assert cluster_devices(SlurmCluster(gpus_per_node=2), 3, None, None, 1) == (["cuda:0"] * 3, "nccl")
    assert cluster_devices(SlurmCluster(), 2, None, None, 1) == (["cpu"] * 2, "gloo")
    for bad, words in (({"nodes": 0}, "nodes=0"), ({"gpus_per_node": -1}, "gpus_per_node=-1"),
                       ({"partition": "a b"}, "partition='a b'"), ({"extra_args": "--exclusive"}, "extra_args="),
                       ({"node_timeout": 0}, "node_timeout=0"), ({"keep_warm": -1}, "keep_warm=-1"),
                       ({"keep_warm": True}, "keep_warm=True"), ({"keep_warm": float("inf")}, "keep_warm=inf")):
        with pytest.raises(LaunchError, match="is not allowed") as caught:
            SlurmCluster(**bad)  # type: ignore[arg-type]
        assert words in str(caught.value)
    with pytest.raises(LaunchError, match="unknown keys \\['adress'\\]"):
        check_cluster({"kind": "slurm", "adress": "x"})


def test_the_cli_flags_make_a_slurm_cluster() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_flags(lambda p, name, **kw: p.add_argument(f"--{name}", dest=name, **kw), parser)
    args = parser.parse_args(["--cluster", "slurm", "--gpus_per_node", "2", "--partition", "gpu"])
    # nothing kept warm: a script's launch is its process's only one
    assert cluster_from_flags(None, args) == SlurmCluster(gpus_per_node=2, partition="gpu", keep_warm=0)


def test_the_srun_command_places_one_task_per_rank_node_by_node() -> None:
    cluster = SlurmCluster(gpus_per_node=1, nodes=2, extra_args=("--exclusive",))
    command = srun_command(cluster, "1234", 8, "notebook-accel-x", ["python", "-m", "task"])
    assert command[:3] == ["srun", "--jobid=1234", "--ntasks=8"]
    assert "--distribution=block" in command and "--input=all" in command and "--gpus-per-task=1" in command
    assert "--nodes=2" in command and command[-4:] == ["--exclusive", "python", "-m", "task"]
    assert "--gpus-per-task=1" not in srun_command(SlurmCluster(), "1", 2, "n", ["t"])


def test_slurm_count_lists_and_a_tasks_identity() -> None:
    assert expand_counts("2(x3),1") == [2, 2, 2, 1] and expand_counts("4") == [4]
    with pytest.raises(ValueError):
        expand_counts("two")
    variables = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_STEP_NUM_TASKS": "7",
                 "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURMD_NODENAME": "gpu17", "SLURM_JOB_ID": "99",
                 "SLURM_STEP_ID": "3"}
    identity = task_identity(variables)
    assert (identity.rank, identity.local_rank, identity.local_world_size, identity.world_size, identity.node,
            identity.step) == (5, 1, 2, 7, "gpu17", "99.3")
    with pytest.raises(LaunchError, match="does not look like a task of an srun step"):
        task_identity({"SLURM_PROCID": "0"})


def test_a_tasks_lines_and_srun_s_own_are_told_apart() -> None:
    identity = task_identity({"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NTASKS": "2",
                              "SLURM_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "7",
                              "SLURM_STEP_ID": "0"})
    assert parse_line(start_line(identity, 4242)) == ("start", 1, ["n2", "4242", "7.0"])
    assert parse_line(exit_line(1, -9, "n2")) == ("exit", 1, ["-9", "n2"])
    assert parse_line("srun: error: n2: task 1: Exited with exit code 1") is None


def test_a_run_bigger_than_the_allocation_is_refused_with_what_it_holds() -> None:
    check_fits(4, "2(x2)", ["n1", "n2"], "12")
    with pytest.raises(LaunchError, match="num_processes=5 is more than Slurm job 12 holds: 2 node.*at most 4"):
        check_fits(5, "2(x2)", ["n1", "n2"], "12")
