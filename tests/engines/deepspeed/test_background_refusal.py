"""DeepSpeed's checkpoint cannot be written in the background: ``save_state(async_save=True)`` refuses it, saying why."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, background
from notebook_accel.engines.deepspeed.checkpoint import engine_checkpoint
from tests.checkpointing.fakes import make_accelerator


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_background_save_of_a_deepspeed_engine_is_refused_naming_why(tmp_path: Path, monkeypatch,
                                                                        stage: int) -> None:
    engine = SimpleNamespace(zero_optimization_stage=lambda: stage, module=torch.nn.Linear(2, 2),
                             save_checkpoint=lambda *a, **k: pytest.fail("nothing may be written"))
    monkeypatch.setattr(background, "collect", lambda accelerator: [engine_checkpoint(engine, 0)])
    with pytest.raises(CheckpointError, match=r"cannot write this state in the background: model 0 \(Linear\): "
                                              r"DeepSpeed writes its checkpoint with engine.save_checkpoint\(\).*"
                                              r"live engine.*async_save=False"):
        background.save_state_in_background(make_accelerator(), str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt").exists() and background.in_flight() is None
