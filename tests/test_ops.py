"""Collectives in one process (identity), argument errors, and the shape pre-check's message.

The real multi-process behaviour is tested in tests/distributed/test_training.py.
"""

from __future__ import annotations

import pytest
import torch

from notebook_accel import ops
from notebook_accel.errors import NotebookAccelError
from notebook_accel.plugins import ConfigurationError


def test_single_process_is_identity() -> None:
    t = torch.arange(3)
    nested = {"a": [t, (t,)]}
    assert ops.gather(t) is t and ops.gather(nested) is nested
    assert ops.broadcast(t) is t and ops.pad_across_processes(t) is t
    assert ops.reduce(t, "max") is t
    assert ops.reduce(torch.tensor(2.0), "sum", scale=0.5).item() == 1.0
    assert ops.gather_object([1, 2]) == [1, 2] and ops.gather_object("x") == ["x"]
    assert ops.broadcast_object_list([1]) == [1]


def test_bad_reduction() -> None:
    with pytest.raises(ConfigurationError, match="allowed: sum, mean, max"):
        ops.reduce(torch.ones(1), "min")  # type: ignore[arg-type]


def test_signature_round_trip() -> None:
    leaves = [torch.zeros(2, 3), torch.zeros((), dtype=torch.int64), torch.zeros(1, dtype=torch.uint32)]
    assert ops._decode(ops._encode(leaves)) == [((2, 3), 0), ((), 4), ((1,), 99)]


def test_shape_mismatch_message_lists_every_rank() -> None:
    shapes = [[((2, 3), 0)], [((2, 4), 0)]]
    with pytest.raises(ops.CollectiveShapeError) as info:
        ops._check("gather", shapes, free_dim=0, hint="Fix it.")
    message = str(info.value)
    assert "rank 0: [(2, 3) float32]" in message and "rank 1: [(2, 4) float32]" in message and "Fix it." in message
    assert isinstance(info.value, NotebookAccelError) and isinstance(info.value, RuntimeError)
    ops._check("gather", [[((2, 3), 0)], [((5, 3), 0)]], free_dim=0, hint="")  # dim 0 may differ
    with pytest.raises(ops.CollectiveShapeError, match="other"):
        ops._check("reduce", [[((1,), 99)], [((1,), 0)]], free_dim=None, hint="")
    with pytest.raises(ops.CollectiveShapeError):
        ops._check("reduce", [[((1,), 0)], []], free_dim=None, hint="")
