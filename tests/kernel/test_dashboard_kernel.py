"""Real-kernel test: a 2-process launch in a notebook cell leaves the live dashboard and a static snapshot.

A notebook is executed with nbclient in a fresh IPython kernel; its cell runs ``notebook_launcher`` on two
forked workers whose main process logs metrics through the tracker hub (what ``accelerator.log`` calls) and
reports progress. The cell's saved outputs must hold the widget view (the live dashboard) and, for saved
notebooks / HTML exports / nbval, the static snapshot: an ``image/png`` of the curves and the summary.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[2]

CELL = textwrap.dedent(
    """
    import os, time
    from notebook_accel import notebook_launcher
    from notebook_accel.progress import progress
    from notebook_accel.tracking import TrackerHub

    def train(steps):
        rank = int(os.environ["RANK"])
        hub = TrackerHub(log_with=None, logging_dir=None, is_main_process=rank == 0, rank=rank)
        print(f"hello from rank {rank}")
        for step in progress(range(steps), desc="epoch 0"):
            hub.log({"train/loss": 1.0 / (step + 1), "eval/loss": 1.5 / (step + 1)}, step, {})
            time.sleep(0.005)
        hub.finish()
        return "done"

    result = notebook_launcher(train, args=(60,), num_processes=2)
    print("result:", result)
    """
)


@pytest.mark.timeout(240)
@pytest.mark.skipif(importlib.util.find_spec("notebook_accel.launcher") is None, reason="launcher module missing")
def test_cell_outputs_hold_the_dashboard_and_the_snapshot(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(CELL))
    client = nbclient.NotebookClient(
        nb,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(REPO)}},  # the kernel starts in the repository (imports resolve)
    )
    client.execute(env={**os.environ, "PYTHONPATH": str(REPO)})
    outputs = nb.cells[0].outputs
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, "\n".join(o.get("ename", "") + ": " + o.get("evalue", "") for o in errors)
    data = [o.get("data", {}) for o in outputs if o.output_type == "display_data"]
    widget_views = [d for d in data if "application/vnd.jupyter.widget-view+json" in d]
    images = [d["image/png"] for d in data if "image/png" in d]
    summaries = [d for d in data if "text/html" in d and "train: finished" in d["text/html"]]
    assert len(widget_views) == 1, f"expected one dashboard widget, got mime types {[list(d) for d in data]}"
    assert len(images) == 1 and base64.b64decode(images[0]).startswith(b"\x89PNG")
    assert len(summaries) == 1
    assert "train/loss = 0.016667 (step 59)" in summaries[0]["text/plain"]
    assert "ranks: 0=finished, 1=finished" in summaries[0]["text/plain"]
    stdout = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "result: done" in stdout
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    html_values = [m["state"].get("value", "") for m in state.values() if m.get("model_name") == "HTMLModel"]
    assert any("hello from rank 0" in v for v in html_values), "the log pane did not get the main process's output"
