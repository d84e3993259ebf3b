"""A collective called on only some ranks: the error says which rank called what and which ranks had returned."""

from __future__ import annotations

import pytest

from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from tests.launcher import partial_workers
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


def test_gather_on_the_main_process_only_names_the_call_and_the_returned_rank() -> None:
    sink = RecordingSink()
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(partial_workers.gather_on_main_only, num_processes=2, timeout=60, dashboard=sink,
                          use_cpu=True)
    text = str(caught.value)
    assert text.startswith(f"rank 0 called gather (partial_workers.py, line {partial_workers.GATHER_LINE}) but rank 1 "
                           "had already "
                           "returned from the training function: a collective must be called on every rank")
    assert caught.value.returned == (1,)
    mine = text.split("rank 0, your code only:", 1)[1]
    assert "partial_workers.py" in mine and "accelerator.gather(t)" in mine
    for library in ("notebook_accel/accelerator/", "notebook_accel/ops.py", "distributed_c10d.py", "worker.py"):
        assert library not in mine
    assert sink.outcome is not None and sink.outcome.error.startswith("rank 0 called gather")


def test_a_timeout_while_other_ranks_had_returned_says_so() -> None:
    with pytest.raises(LaunchTimeoutError) as caught:
        notebook_launcher(partial_workers.main_waits_forever, num_processes=2, timeout=8, dashboard=False,
                          use_cpu=True)
    assert "(ranks still running: [0])" in str(caught.value)
    assert "Ranks [1] had already returned from the function" in str(caught.value)
