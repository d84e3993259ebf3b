"""The prepared optimizer: steps only when syncing, fp16 skip detection, forwarding."""

from __future__ import annotations

import torch

from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.state import GradientState


def _setup(scaler: object = None) -> tuple[torch.nn.Parameter, AcceleratedOptimizer, GradientState]:
    param = torch.nn.Parameter(torch.ones(1))
    state = GradientState()
    return param, AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0), state, scaler), state


def test_steps_and_zero_grad_only_when_syncing() -> None:
    param, opt, state = _setup()
    param.grad = torch.ones(1)
    state.sync_gradients = False
    opt.step()
    opt.zero_grad()
    assert param.item() == 1.0 and param.grad is not None
    state.sync_gradients = True
    opt.step()
    opt.zero_grad()
    assert param.item() == 0.0 and param.grad is None and not opt.step_was_skipped


def test_fp16_scaler_skip_is_reported() -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    param, opt, _ = _setup(scaler)
    scaler.scale((param * float("inf")).sum()).backward()
    opt.step()
    assert opt.step_was_skipped and param.item() == 1.0 and scaler.get_scale() == 2.0
    opt.zero_grad()
    scaler.scale(param.sum()).backward()
    opt.step()
    assert not opt.step_was_skipped and param.item() == 0.0


def test_forwards_state_and_groups() -> None:
    param, opt, _ = _setup()
    assert isinstance(opt, torch.optim.Optimizer)
    opt.param_groups[0]["lr"] = 0.5
    assert opt.optimizer.param_groups[0]["lr"] == 0.5 and opt.defaults["lr"] == 1.0
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})
    saved = opt.state_dict()
    opt.load_state_dict(saved)
    assert len(opt.param_groups) == 2 and opt.state is opt.optimizer.state
    opt.train(), opt.eval()
    assert "SGD" in repr(opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # schedulers accept the wrapper
    assert sched.get_last_lr() == [0.5, 1.0]
