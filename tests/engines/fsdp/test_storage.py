"""The DCP reader of one process: records read once, and a record that fills a tensor whole is not copied."""

from __future__ import annotations

from pathlib import Path

import torch

from notebook_accel.engines.fsdp.storage import load_sharded, save_sharded


def _state() -> dict[str, object]:
    torch.manual_seed(0)
    return {"model": {"w": torch.randn(64, 32), "b": torch.randn(64)},
            "optimizer_0": {"state": {"w": {"exp_avg": torch.randn(64, 32), "step": torch.tensor(3.0)}},
                            "param_groups": [{"lr": 0.1, "params": ["w"]}]}}


def test_whole_records_become_the_values_and_the_template_is_never_written(tmp_path: Path) -> None:
    saved = _state()
    save_sharded(saved, str(tmp_path), "fsdp_state_0", "model 0")
    template = {"model": {"w": torch.zeros(64, 32), "b": torch.zeros(64)},
                "optimizer_0": {"state": {"w": {"exp_avg": torch.zeros(64, 32), "step": torch.tensor(0.0)}},
                                "param_groups": [{"lr": 0.5, "params": ["w"]}]}}
    empty = {"w": template["model"]["w"], "exp_avg": template["optimizer_0"]["state"]["w"]["exp_avg"]}
    loaded = load_sharded(template, str(tmp_path), "fsdp_state_0", "model 0")
    assert torch.equal(loaded["model"]["w"], saved["model"]["w"])
    assert torch.equal(loaded["optimizer_0"]["state"]["w"]["exp_avg"], saved["optimizer_0"]["state"]["w"]["exp_avg"])
    assert loaded["optimizer_0"]["state"]["w"]["step"].item() == 3.0
    assert loaded["optimizer_0"]["param_groups"][0]["lr"] == 0.1
    # the values are the tensors the records were read into: the template's were not copied into
    assert loaded["model"]["w"] is not empty["w"] and not empty["w"].any()
    assert loaded["optimizer_0"]["state"]["w"]["exp_avg"] is not empty["exp_avg"] and not empty["exp_avg"].any()
