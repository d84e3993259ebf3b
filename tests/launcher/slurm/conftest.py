"""A real two-node Slurm (22.05, Debian's packages) for the Slurm placement's tests: ``slurm_cluster``.

n1 is this host, n2 a network namespace joined by a veth; see tests/launcher/slurm/cluster.py for what the fixture
object offers and bringup.py for how it comes up. Skips, with the reason, when this is not root or the packages
(slurmctld, slurmd, slurm-client, munge, iproute2) are absent; ``python3 dev.py test`` installs them as root.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from notebook_accel.launcher.placement.slurm.warm import release_slurm_steps
from tests.launcher.slurm.bringup import missing, start_cluster
from tests.launcher.slurm.cluster import Allocation, SlurmTestCluster, wait_for


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmTestCluster]:
    """The cluster, up once per test module (about 1.5 s); every process, the namespace and the folder gone after.

    Not once per session: its keeper is a child of the test process, and the tests that follow check that a launch
    leaves this process no child."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    try:
        with start_cluster() as cluster:
            yield cluster
    except subprocess.CalledProcessError as e:
        if e.cmd and e.cmd[0] == "ip":
            pytest.skip(f"network namespaces are not available here ({' '.join(e.cmd)}: {e.stderr})")
        raise


@pytest.fixture
def inside(slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Allocation]:
    """This process inside a two-node allocation (its environment is the allocation's batch step's on n1). After the
    test the steps its runs kept warm are released (the test process is a kernel that lives on), then nothing of
    the runs may be left: no step but the allocation's own batch step, and no task process on either node."""
    with slurm_cluster.allocation(2) as held:
        for name in [n for n in os.environ if n.startswith("SLURM")]:
            monkeypatch.delenv(name)
        for name, value in {**slurm_cluster.env, **held.env}.items():
            monkeypatch.setenv(name, value)
        try:
            yield held
        finally:
            release_slurm_steps()
        # a lost node can end the batch step too
        assert [e for e in slurm_cluster.squeue() if e not in (held.job_id, f"{held.job_id}.batch")] == []
        wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")
