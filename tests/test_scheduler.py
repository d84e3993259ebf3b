"""The prepared scheduler: num_processes steps per real step, split_batches, skips."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.scheduler import AcceleratedScheduler
from notebook_accel.state import GradientState

# the wrapped optimizers never step here, which torch warns about
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of", "ignore:To get the last learning rate")


def _setup(**kwargs: object) -> tuple[AcceleratedScheduler, AcceleratedOptimizer, GradientState]:
    state = GradientState()
    inner = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    opt = AcceleratedOptimizer(inner, state)
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    return AcceleratedScheduler(sched, [opt], state, **kwargs), opt, state  # type: ignore[arg-type]


def test_steps_num_processes_times() -> None:
    sched, _, _ = _setup(num_processes=2)
    sched.step()
    assert sched.get_last_lr() == [0.25]


def test_split_batches_steps_once() -> None:
    sched, _, _ = _setup(num_processes=2, split_batches=True)
    sched.step()
    assert sched.get_last_lr() == [0.5]


def test_no_step_when_accumulating_or_skipped() -> None:
    sched, opt, state = _setup(num_processes=1)
    state.sync_gradients = False
    sched.step()
    assert sched.get_last_lr() == [1.0]
    state.sync_gradients = True
    opt._skipped = True
    sched.step()
    assert sched.get_last_lr() == [1.0]


def test_step_with_optimizer_false_always_steps() -> None:
    sched, _, state = _setup(num_processes=4, step_with_optimizer=False)
    state.sync_gradients = False
    sched.step()
    assert sched.get_last_lr() == [0.5]


def test_one_cycle_never_steps_past_its_end() -> None:
    state = GradientState()
    inner = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    cycle = torch.optim.lr_scheduler.OneCycleLR(inner, max_lr=1.0, total_steps=3)
    sched = AcceleratedScheduler(cycle, [], state, num_processes=2)
    for _ in range(3):
        sched.step()  # would raise inside OneCycleLR past total_steps
    state_dict = sched.state_dict()
    sched.load_state_dict(state_dict)
    assert sched.get_lr() and "OneCycleLR" in repr(sched)
    with pytest.raises(ValueError):
        cycle.step()
