"""WorkerError / LaunchTimeoutError: messages, attributes, pickling."""

from __future__ import annotations

import pickle

import pytest

from notebook_accel.errors import NotebookAccelError
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, WorkerFailure
from notebook_accel.launcher.supervision.failures import grouped_summaries

RAISED = WorkerFailure(1, 1, None, "ValueError", "bad lr", "Traceback (most recent call last):\n  ...\nValueError: bad lr\n")
KILLED = WorkerFailure(0, -9, "SIGKILL", "", "killed by SIGKILL (exit code -9)", "")


def test_one_failure() -> None:
    error = WorkerError([RAISED])
    assert (error.rank, error.exit_code, error.traceback) == (1, 1, RAISED.traceback)
    text = str(error)
    assert text.startswith("worker rank 1: ValueError: bad lr")
    assert "rank 1, your code only:" in text and text.rstrip().endswith("ValueError: bad lr")
    assert isinstance(error, RuntimeError) and isinstance(error, NotebookAccelError)


def test_several_failures_all_named() -> None:
    error = WorkerError([KILLED, RAISED])
    text = str(error)
    assert text.startswith("2 workers failed (ranks 0, 1):")
    assert "rank 0: killed by SIGKILL" in text and "rank 1: ValueError: bad lr" in text
    assert error.rank == 0 and error.failures == (KILLED, RAISED)


LOST_PEER = WorkerFailure(
    0, 1, None, "RuntimeError",
    "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16025. This is typically caused by "
    "a remote worker crashing. Check the logs of the remote worker before reporting an error." + " padding" * 20, "tb",
)


def test_lost_peer_is_reported_as_a_consequence_after_the_real_failure() -> None:
    error = WorkerError([LOST_PEER, RAISED])  # even when the consequence arrived first
    assert error.failures == (RAISED, LOST_PEER) and error.rank == 1 and error.traceback == RAISED.traceback
    text = str(error)
    assert text.startswith("worker rank 1: ValueError: bad lr\nthen rank 0 lost the connection to the failed worker")
    assert "rank 0: RuntimeError: [../gloo" in text and "padding padding" not in text  # shortened
    assert LOST_PEER.lost_peer and not RAISED.lost_peer and not KILLED.lost_peer


def test_only_lost_peers_are_still_reported() -> None:
    error = WorkerError([LOST_PEER])
    assert error.failures == (LOST_PEER,) and str(error).startswith("worker rank 0: RuntimeError:")


def test_pickles() -> None:
    error = pickle.loads(pickle.dumps(WorkerError([RAISED])))
    assert error.failures == (RAISED,) and str(error) == str(WorkerError([RAISED]))


def test_needs_a_failure() -> None:
    with pytest.raises(ValueError):
        WorkerError([])


def test_timeout_error_types() -> None:
    error = LaunchTimeoutError("slow")
    assert isinstance(error, TimeoutError) and isinstance(error, NotebookAccelError)


IN_GATHER = WorkerFailure(0, 1, None, LOST_PEER.exc_type, LOST_PEER.message, "tb", "gather (Cell In[8], line 12)")


def test_a_lost_peer_that_had_returned_is_named_as_a_partial_collective() -> None:
    text = str(WorkerError([IN_GATHER], returned=(1,)))
    assert text.startswith("rank 0 called gather (Cell In[8], line 12) but rank 1 had already returned from the training "
                           "function: a collective must be called on every rank\n")
    assert "rank 0: RuntimeError: [../gloo" in text and "lost the connection to the failed worker" not in text
    several = str(WorkerError([WorkerFailure(0, 1, None, "RuntimeError", LOST_PEER.message, "tb")], returned=(3, 1)))
    assert several.startswith("rank 0 called a collective but ranks 1, 3 had already returned")


def test_a_real_failure_beside_returned_ranks_is_reported_as_before() -> None:
    assert str(WorkerError([RAISED], returned=(0,))).startswith("worker rank 1: ValueError: bad lr")
    assert str(WorkerError([IN_GATHER])).startswith("worker rank 0: RuntimeError:")  # nobody returned: a crash


def test_the_returned_ranks_survive_pickling() -> None:
    error = pickle.loads(pickle.dumps(WorkerError([IN_GATHER], returned=(1,))))
    assert error.returned == (1,) and str(error).startswith("rank 0 called gather")


STALE = ("DeepSpeed's communication op (deepspeed_shm_comm) cannot be built: a stopped build left its lock, and "
         "torch would wait for it forever. Fix: `rm /cache/deepspeed_shm_comm/lock`, then launch again")


def _stale(rank: int) -> WorkerFailure:
    tb = (f"Traceback (most recent call last):\n  File \"train.py\", line 3, in train\n"
          f"notebook_accel.engines.deepspeed.jit_ops.StaleBuildLockError: {STALE}\n")
    return WorkerFailure(rank, 1, None, "StaleBuildLockError", STALE, tb)


def test_ranks_failing_the_same_way_share_one_line_and_a_long_message_is_not_repeated_by_the_traceback() -> None:
    text = str(WorkerError([_stale(0), _stale(1)]))
    assert text.count(STALE) == 1
    assert "  ranks 0, 1: StaleBuildLockError: " + STALE in text
    assert text.rstrip().endswith("jit_ops.StaleBuildLockError (its message is above)")


def test_the_headline_summary_is_one_short_line_per_distinct_error() -> None:
    lines = grouped_summaries([_stale(0), RAISED, _stale(2)], short=True)
    assert lines[0].startswith("ranks 0, 2: StaleBuildLockError: DeepSpeed") and lines[0].endswith("...")
    assert STALE not in lines[0] and lines[1] == "rank 1: ValueError: bad lr"
