"""A Slurm run from a real Jupyter kernel inside the test cluster's allocation: the dashboard hears both nodes (n1 and
n2) while the run goes on, not only at its end, and the saved static result shows each rank's node."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.launcher.slurm.cluster import SlurmTestCluster, wait_for

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipywidgets")

from tests.kernel.test_launcher_kernel import execute, running_kernel  # noqa: E402 - after the skips

CELL = """
from notebook_accel import notebook_launcher
from tests.distributed.workers import both_ranks_report
from tests.launcher.live_dashboard import Timed

dash = Timed(show_all_ranks=True)
value = notebook_launcher(both_ranks_report, args=(100,), num_processes=2, cluster="slurm", dashboard=dash)
"""

REPORT = """
import json
from tests.launcher.live_dashboard import report
print("REPORT " + json.dumps(report(dash, value)))
"""


@pytest.mark.timeout(300)
def test_the_dashboard_hears_both_nodes_while_the_run_goes_on(slurm_cluster: SlurmTestCluster) -> None:
    with slurm_cluster.allocation(2) as held:
        with running_kernel(slurm_cluster.client_env(held)) as (_, kc):
            cell = execute(kc, CELL, timeout=240)
            assert cell.status == "ok", (cell.evalue, cell.stderr[-3000:])
            answer = execute(kc, REPORT, timeout=60)
            assert answer.status == "ok", answer.evalue
        # nothing of the run is left once the kernel ended (its step, kept warm for a next launch, ends with it):
        # no step but the allocation's batch step, no task process on either node
        wait_for(lambda: [e for e in slurm_cluster.squeue() if e not in (held.job_id, f"{held.job_id}.batch")] == [],
                 30, "the kernel's step to leave the queue")
        wait_for(lambda: not slurm_cluster.task_processes(), 20, "task processes to end")
    line = next(x for x in answer.stdout.splitlines() if x.startswith("REPORT "))
    got: dict[str, Any] = json.loads(line[len("REPORT "):])
    assert got["value"] == 2 and got["status"] == "finished", got
    assert got["nodes"] == ["n1", "n2"] and got["spans_machines"], got  # rank 0 on n1, rank 1 on n2
    assert got["output_live"] == [True, True], got  # each node's prints, heard while the run went on
    assert got["samples_live"] == [True, True], got  # each node's system figures
    assert got["progress_live"] == [True, True], got
    assert got["metrics_live"] and "loss" in got["series"], got
    assert got["system_ranks"] == [0, 1], got
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in cell.outputs if o["type"] in
                   ("display_data", "update_display_data"))
    assert "rank 1" in html and "n2" in html and ">node<" in html, html[-3000:]  # the saved static result
