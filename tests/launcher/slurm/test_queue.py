"""Asking for an allocation without Slurm: sinfo's partitions, the refusals of a request that cannot fit (naming the
bad value, what the partition has and the fix), the holding job's sbatch options, squeue's state and reason, and
Slurm's time limits."""

from __future__ import annotations

import dataclasses

import pytest

from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.cluster.slurm_time import time_minutes
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.slurm.queue import check_request, job_state, partitions, sbatch_options

SINFO = """gpu|g1|64|gpu:a100:4(S:0-1)|2-00:00:00|up
gpu|g2|64|gpu:a100:4(S:0-1)|2-00:00:00|up
gpu|g3|32|gpu:2|2-00:00:00|up
cpu|c1|128|(null)|infinite|up
cpu|c2|128+|(null)|infinite|up
old|o1|8|(null)|1:00:00|down
"""


def test_sinfo_lines_make_partitions() -> None:
    found = partitions(SINFO)
    assert sorted(found) == ["cpu", "gpu", "old"]
    assert dict(found["gpu"].gpus) == {"g1": 4, "g2": 4, "g3": 2} and found["gpu"].max_minutes == 2880
    assert dict(found["cpu"].cpus) == {"c1": 128, "c2": 128} and found["cpu"].max_minutes is None
    assert not found["old"].up
    assert found["gpu"].describe() == "3 nodes (g1, g2, g3) with 32 to 64 CPUs and 2 to 4 GPUs each"


@pytest.mark.parametrize(("request_", "tasks", "words"), [
    (SlurmCluster(partition="gpux"), 2, r"partition='gpux'\) is not a partition .* \['cpu', 'gpu', 'old'\]"),
    (SlurmCluster(partition="old"), 2, "partition 'old' is not up"),
    (SlurmCluster(partition="gpu", nodes=4), 4, r"nodes=4\) is more than partition 'gpu' has: 3 nodes"),
    (SlurmCluster(partition="gpu", nodes=3), 2, "num_processes=2 is fewer than SlurmCluster\\(nodes=3\\)"),
    (SlurmCluster(partition="gpu", gpus_per_node=8), 8, r"gpus_per_node=8\) is more than any node .*gpus_per_node<=4"),
    (SlurmCluster(partition="gpu", gpus_per_node=4, nodes=2), 9, "num_processes=9 needs 9 GPUs.* give 8"),
    (SlurmCluster(partition="gpu", gpus_per_node=4), 9, "num_processes=9 needs 9 GPUs.* give 8"),
    (SlurmCluster(partition="cpu"), 257, "num_processes=257 is more CPU tasks .* 256 on 2 node"),
    (SlurmCluster(partition="gpu", time="3-0"), 2, r"time='3-0'\) is longer than partition 'gpu' allows "
                                                   r"\(2-00:00:00\)"),
    (SlurmCluster(partition="gpu", time="infinite"), 2, r"time='infinite'\) is longer than partition 'gpu'"),
])
def test_requests_that_cannot_fit_are_refused_with_the_fix(request_: SlurmCluster, tasks: int, words: str) -> None:
    with pytest.raises(LaunchError, match=words):
        check_request(request_, tasks, partitions(SINFO))


def test_requests_that_fit_pass() -> None:
    known = partitions(SINFO)
    assert check_request(SlurmCluster(partition="gpu", gpus_per_node=4, nodes=2, time="1:00:00"), 8, known).name == \
        "gpu"
    assert check_request(SlurmCluster(partition="cpu", nodes=2), 200, known).name == "cpu"
    assert check_request(SlurmCluster(partition="gpu"), 2, known).name == "gpu"  # no time=: the partition's default


def test_the_holding_job_asks_for_what_the_request_says() -> None:
    options = sbatch_options(SlurmCluster(partition="gpu", nodes=2, gpus_per_node=4, time="1:00:00", account="lab",
                                          extra_args=["--constraint=a100"]), 8, "notebook-accel-ab12")
    assert options == ["--parsable", "--job-name=notebook-accel-ab12", "--output=/dev/null", "--no-requeue",
                       "--partition=gpu", "--ntasks=8", "--nodes=2", "--gpus-per-node=4", "--time=1:00:00",
                       "--account=lab", "--constraint=a100", "--wrap=exec sleep infinity"]


def test_squeue_says_the_state_and_why_it_waits() -> None:
    assert job_state("PENDING|Resources|\n").queued_line("7") == "queued: job 7 (Resources)"
    assert job_state("PENDING|None|").queued_line("7") == "queued: job 7 (pending)"
    running = job_state("RUNNING|None|n[1-2]")
    assert running.state == "RUNNING" and running.nodelist == "n[1-2]" and not running.waiting
    assert job_state("").state == "" and not job_state("").waiting
    assert job_state("CONFIGURING|None|n1").waiting


def test_slurm_time_limits() -> None:
    assert [time_minutes(t) for t in ("45", "5:30", "1:30:00", "2-0", "1-2:3", "1-0:0:30", "INFINITE")] == \
        [45, 5.5, 90, 2880, 1563, 1440.5, None]
    for bad in ("1h", "1:2:3:4", "-1", "1-", ""):
        with pytest.raises(ValueError):
            time_minutes(bad)
    with pytest.raises(LaunchError, match=r"time='90m'\) is not a Slurm time limit; give one of Slurm's forms MM"):
        SlurmCluster(time="90m")


def test_a_login_request_reaches_the_cluster_from_the_config_and_the_cli() -> None:
    import argparse

    from notebook_accel.cluster.registry import add_cluster_flags, cluster_from_flags
    from notebook_accel.config import Config

    wanted = SlurmCluster(partition="gpu", nodes=2, gpus_per_node=4, time="2:00:00", account="lab")
    assert Config(extra={"cluster": {"kind": "slurm", "partition": "gpu", "nodes": 2, "gpus_per_node": 4,
                                     "time": "2:00:00", "account": "lab"}}).cluster == wanted
    parser = argparse.ArgumentParser()
    add_cluster_flags(lambda p, name, **kw: p.add_argument(f"--{name}", dest=name, **kw), parser)
    args = parser.parse_args(["--cluster", "slurm", "--partition", "gpu", "--slurm_nodes", "2", "--gpus_per_node",
                              "4", "--slurm_time", "2:00:00", "--account", "lab"])
    # a CLI launch is its process's only run: it keeps no step warm
    assert cluster_from_flags(None, args) == dataclasses.replace(wanted, keep_warm=0.0)
    with pytest.raises(LaunchError, match="time='2h'"):
        cluster_from_flags(None, parser.parse_args(["--cluster", "slurm", "--partition", "gpu", "--slurm_time", "2h"]))
