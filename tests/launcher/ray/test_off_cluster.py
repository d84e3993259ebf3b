"""A notebook off the cluster's network (Ray Client, nothing can dial it) runs on the two-node cluster through the
relay: the notebook in a third namespace whose firewall lets it reach only the head's Ray Client port, the worker
node with no route to it.

What a user relies on: the same training as a local 2-process run, to 1e-6; output and curves arriving while the
run goes on; a rank's failure named with its rank and node; ``timeout=`` and the stop button ending the run and
freeing everything (the relay included); and the kernel's share of a core while both ranks log 1,000 records a
second, printed beside the same run forked in that kernel.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.launcher.ray.conftest import ROOT, OffClusterNotebook, RayTestCluster, driver_env, result_of
from tests.launcher.ray.test_two_nodes import assert_rank_one_failed, assert_trains_like_local

pytestmark = pytest.mark.timeout(600)


def test_an_off_cluster_notebook_trains_sees_the_run_live_and_stops_it_through_the_relay(
        ray_cluster: RayTestCluster, off_cluster_notebook: OffClusterNotebook) -> None:
    proc = subprocess.run(off_cluster_notebook.command(sys.executable, "-m", "tests.launcher.ray.driver", "relayed",
                                                       off_cluster_notebook.address),
                          cwd=ROOT, env=driver_env(), capture_output=True, text=True, timeout=500)
    result = result_of(proc.stdout, proc.stderr)
    assert_trains_like_local(result["value"])

    lags = result["lags"]
    assert isinstance(lags, list) and lags, result
    print(f"relayed: first curve point {result['first_curve_lag']:.2f} s after it was logged; batch lags median "
          f"{lags[len(lags) // 2]:.2f} s, max {lags[-1]:.2f} s; output lines {result['lines']}; kernel CPU "
          f"{100 * float(result['relayed_cpu']):.1f}% of a core (the same run forked here: "
          f"{100 * float(result['local_cpu']):.1f}%); stop took {float(result['stop_seconds']):.1f} s; launch to the "
          f"first step: cold {float(result['cold']):.1f} s, warm {result['warm_ray']} s (a warm local launch from the "
          f"same kernel: {result['warm_local']} s)")
    assert result["logged"] >= 1000
    assert float(result["first_curve_lag"]) < 30  # a hang guard: the figure itself is printed above
    lines = result["lines"]
    assert isinstance(lines, dict) and set(lines) == {"0", "1"}, lines  # both ranks' output came through

    during = result["during"]
    assert isinstance(during, dict) and len(during["placement_groups"]) == 1, during
    assert len(during["actors"]) == 3, during  # two ranks and the relay: the workers could not reach the notebook
    assert_rank_one_failed(ray_cluster, result["failed"])
    timed_out = result["timed_out"]
    assert isinstance(timed_out, dict) and timed_out["type"] == "LaunchTimeoutError", timed_out
    assert "ranks still running: [0, 1]" in timed_out["text"], timed_out
    stopped = result["stopped"]
    assert isinstance(stopped, dict) and stopped["type"] == "RunStoppedError", stopped
    assert result["after"] == {"actors": [], "placement_groups": [], "kept_warm": []}
    assert result["left_warm"] == {"actors": [], "placement_groups": [], "kept_warm": []}
