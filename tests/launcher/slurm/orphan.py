"""A test process that is going to be killed: ``python -m tests.launcher.slurm.orphan`` starts a test cluster, puts a
job step with a task on each node in it (a batch job, so the tasks are no children of ours), prints
``READY {"folder": ..., "tag": ..., "keeper": pid}`` and sleeps until killed. test_cluster.py kills it (and maybe its
keeper) and checks what is left.
"""

from __future__ import annotations

import json
import time

from tests.launcher.slurm.bringup import start_cluster
from tests.launcher.slurm.cluster import NODES, wait_for


def main() -> None:
    """Start, fill, report, sleep."""
    with start_cluster() as cluster:
        cluster.slurm("sbatch", "-N2", "--exclusive", "-o", "/dev/null", "--wrap",
                      "srun -n4 env NAS_ORPHAN_TASK=1 sleep 1000")
        wait_for(lambda: all(len(cluster.processes_on(node, "NAS_ORPHAN_TASK=1")) == 2 for node in NODES), 60.0,
                 "the orphan step's tasks on both nodes", cluster.logs)
        print("READY " + json.dumps({"folder": cluster.folder, "tag": cluster.tag, "keeper": cluster.keeper.pid}),
              flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    main()
