"""A ``Trainer`` launched from a real kernel that imported transformers first: the saved cell's static result shows
the Trainer's curves, and the workers drew transformers' console bar, not its notebook HTML (which they cannot show).

Skipped without transformers, nbformat or nbclient (all in the ``test`` extra).
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.kernel.live_run import REPO

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[test])")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

FIRST_CELL = "import transformers.trainer  # as a notebook's imports cell would: transformers picks its notebook bar"
TRAIN_CELL = textwrap.dedent(
    """
    from notebook_accel import notebook_launcher
    from tests.integrations import trainer_workers

    result = notebook_launcher(trainer_workers.train, args=("trainer-out",), num_processes=2, use_cpu=True)
    print("losses:", len(result["losses"]))
    """
)


@pytest.mark.timeout(300)
def test_the_saved_cell_shows_the_trainers_curves(tmp_path: object) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells += [nbformat.v4.new_code_cell(FIRST_CELL), nbformat.v4.new_code_cell(TRAIN_CELL)]
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env={**os.environ, "PYTHONPATH": str(REPO)})
    outputs = nb.cells[1].outputs
    assert not [o for o in outputs if o.output_type == "error"]
    (result,) = [o["data"] for o in outputs if o.output_type == "display_data"]
    assert 'src="data:image/svg+xml;base64,' in result["text/html"]  # the curves, drawn as the live view drew them
    plain = result["text/plain"]
    assert "train/loss = " in plain and "train/learning_rate = " in plain and "train/grad_norm = " in plain
    assert "IPython.core.display.HTML object" not in result["text/html"]  # the notebook bar would print this
    assert "losses: 4" in "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
