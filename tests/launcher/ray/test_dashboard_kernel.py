"""A Ray run from a real Jupyter kernel: the dashboard hears both nodes while the run goes on, and the saved static
result shows them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.launcher.ray.conftest import RayTestCluster, driver_env

jupyter_client = pytest.importorskip("jupyter_client")

from tests.kernel.test_launcher_kernel import execute, running_kernel  # noqa: E402 - after the skip

CELL = """
import ray
from notebook_accel import notebook_launcher, RayCluster
from tests.distributed.workers import both_ranks_report
from tests.launcher.live_dashboard import Timed

ray.init(address={address!r}, log_to_driver=False, configure_logging=False,
         runtime_env={{"env_vars": {{"PYTHONPATH": {pythonpath!r}}}}})
dash = Timed(show_all_ranks=True)
value = notebook_launcher(both_ranks_report, num_processes=2, cluster=RayCluster(placement="spread"), dashboard=dash)
"""

REPORT = """
import json
from tests.launcher.live_dashboard import report
print("REPORT " + json.dumps(report(dash, value)))
"""


@pytest.fixture
def kernel_with_path() -> Iterator[tuple[Any, Any]]:
    """A kernel whose path reaches this checkout and the test cluster's import shortcuts."""
    with running_kernel({**driver_env(), "NOTEBOOK_ACCEL_LOG_DIR": os.environ["NOTEBOOK_ACCEL_LOG_DIR"]}) as kernel:
        yield kernel


@pytest.mark.timeout(600)
def test_the_dashboard_hears_both_nodes_while_the_run_goes_on(ray_cluster: RayTestCluster,
                                                             kernel_with_path: tuple[Any, Any]) -> None:
    import json

    _, kc = kernel_with_path
    pythonpath = driver_env()["PYTHONPATH"]
    cell = execute(kc, CELL.format(address=ray_cluster.address, pythonpath=pythonpath), timeout=420)
    assert cell.status == "ok", cell.evalue
    report = execute(kc, REPORT, timeout=60)
    assert report.status == "ok", report.evalue
    line = next(x for x in report.stdout.splitlines() if x.startswith("REPORT "))
    got = json.loads(line[len("REPORT "):])
    assert got["value"] == 2 and got["status"] == "finished"
    assert got["output_live"] == [True, True], got
    assert got["samples_live"] == [True, True], got
    assert got["progress_live"] == [True, True], got
    assert got["metrics_live"] and "loss" in got["series"], got
    assert got["system_ranks"] == [0, 1]
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in cell.outputs if o["type"] in
                   ("display_data", "update_display_data"))
    assert "rank 1" in html and "Ray cluster" in html  # the saved static result: both ranks, and where they ran
    # the ranks table's node column (issue 43 item 7): each rank's node, in the live state and the saved result
    assert got["spans_machines"] and sorted(got["nodes"]) == sorted([ray_cluster.head_ip, ray_cluster.worker_ip]), got
    assert ray_cluster.worker_ip in html and ">node<" in html, html[-3000:]
