"""WorkerError / LaunchTimeoutError: messages, attributes, pickling."""

from __future__ import annotations

import pickle

import pytest

from notebook_accel.errors import NotebookAccelError
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, WorkerFailure

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


def test_pickles() -> None:
    error = pickle.loads(pickle.dumps(WorkerError([RAISED])))
    assert error.failures == (RAISED,) and str(error) == str(WorkerError([RAISED]))


def test_needs_a_failure() -> None:
    with pytest.raises(ValueError):
        WorkerError([])


def test_timeout_error_types() -> None:
    error = LaunchTimeoutError("slow")
    assert isinstance(error, TimeoutError) and isinstance(error, NotebookAccelError)
