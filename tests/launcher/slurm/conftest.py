"""A real two-node Slurm (22.05, Debian's packages) for the Slurm placement's tests: ``slurm_cluster``.

n1 is this host, n2 a network namespace joined by a veth; see tests/launcher/slurm/cluster.py for what the fixture
object offers and bringup.py for how it comes up. Skips, with the reason, when this is not root or the packages
(slurmctld, slurmd, slurm-client, munge, iproute2) are absent; ``python3 dev.py test`` installs them as root.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.launcher.slurm.bringup import missing, start_cluster
from tests.launcher.slurm.cluster import SlurmTestCluster


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
