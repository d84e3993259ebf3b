"""Exact resume on 2 processes with the real Accelerator: bitwise equal parameters after a resume at an
epoch boundary and in the middle of an epoch; save_model into plain torch."""

from __future__ import annotations

import pytest
import safetensors.torch
import torch

from notebook_accel.launcher import notebook_launcher
from tests.checkpointing import training


def _launch(fn, *args):
    return notebook_launcher(fn, args, num_processes=2, dashboard=False, use_cpu=True)


def _assert_same(a: dict, b: dict) -> None:
    a, b = {**a, "params": training.from_bytes(a["params"])}, {**b, "params": training.from_bytes(b["params"])}
    assert a["params"].keys() == b["params"].keys()
    for key in a["params"]:
        assert torch.equal(a["params"][key], b["params"][key]), (key, (a["params"][key] - b["params"][key]).abs().max())
    assert {k: v for k, v in a.items() if k != "params"} == {k: v for k, v in b.items() if k != "params"}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "epochs, batches, accumulation, loader_generator",
    [
        (1, 0, 1, False),
        (1, 3, 1, False),
        (0, 4, 2, False),
        (1, 3, 1, True),
        (0, 4, 2, True),
    ],
    ids=["epoch-boundary", "mid-epoch", "mid-epoch-accumulation", "mid-epoch-own-generator",
         "mid-epoch-accumulation-own-generator"],
)
def test_resume_is_bitwise_exact(tmp_path, epochs, batches, accumulation, loader_generator) -> None:
    """2 epochs straight == (epochs + batches) + save_state + fresh processes and objects + load_state + the rest."""
    expected = _launch(training.straight, str(tmp_path / "a"), 2, accumulation, loader_generator)
    _launch(training.first_part, str(tmp_path / "b"), epochs, batches, accumulation, loader_generator)
    got = _launch(training.resumed, str(tmp_path / "b"), 2, accumulation, loader_generator)
    _assert_same(got, expected)


@pytest.mark.timeout(120)
def test_save_model_loads_into_plain_torch(tmp_path) -> None:
    out = _launch(training.export_model, str(tmp_path))
    assert out["path"] == str(tmp_path / "export" / "model.safetensors")
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    fresh.load_state_dict(safetensors.torch.load_file(out["path"]))
    expected = training.from_bytes(out["params"])
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, expected[key])
