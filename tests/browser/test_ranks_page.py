"""The ranks table of a run on several machines in a real browser, without Jupyter: with its node column (long host
names, a failed rank's reason, a progress column) nothing is cut or drawn over its neighbour at the widths the
dashboard is read at (about 870 px of a 1,000 px notebook with the side panel open, and 1,270 px). Screenshots go to
``build/browser/ranks-<width>.png``."""

from __future__ import annotations

import importlib.util

import pytest

from notebook_accel.events import Exited, Failed, Progress, RunInfo, Started
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.views import ranks_html
from tests.browser.test_panel_page import CHROMIUM, render_and_check

if importlib.util.find_spec("playwright") is None or not CHROMIUM.exists():
    pytest.skip("playwright and /usr/bin/chromium are needed", allow_module_level=True)


def _state() -> RunState:
    """Four ranks on two nodes with long names; rank 3's node lost, with the watch's reason."""
    nodes = ("gpu-node-017.us-east-2.compute.internal", "gpu-node-017.us-east-2.compute.internal",
             "gpu-node-0242.cluster-of-the-research-group.us-east-2.compute.internal.example.org", "10.201.7.2")
    state = RunState(RunInfo(4, ("cuda:0",) * 4, "nccl", "train"))
    for rank, node in enumerate(nodes):
        state.apply(Started(rank, 4100 + rank, "cuda:0", node=node))
        state.apply(Progress(rank, 120 + rank, 400, "train", 0))
    state.apply(Failed(0, "RuntimeError", "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                                          "[10.201.7.2]:21674", ""))
    state.apply(Exited(3, -9, "SIGKILL", "its process on node 10.201.7.2 ended without a result (it was killed, or "
                                         "Ray on that node stopped); Ray marked the node dead"))
    return state


@pytest.mark.parametrize("width", [870, 1270])
def test_the_ranks_table_with_its_node_column_fits(width: int) -> None:
    state = _state()
    assert state.spans_machines
    page_html = f'<div id="root" style="width:{width}px;font-family:sans-serif">{ranks_html(state)}</div>'
    problems, table_width = render_and_check(page_html, width, f"ranks-{width}.png",
                                             "r => r.querySelector('table').getBoundingClientRect().width")
    assert problems == [], problems
    assert table_width <= width, table_width
