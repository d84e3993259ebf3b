"""ZeRO with any torch optimizer, as in accelerate (DeepSpeed alone refuses those it has not tested, SGD among them)."""

from __future__ import annotations

import pytest

from notebook_accel import notebook_launcher
from tests.engines.deepspeed import jit_workers, needs_deepspeed

pytestmark = needs_deepspeed


@pytest.mark.timeout(240)
def test_zero_takes_any_torch_optimizer_as_accelerate_does() -> None:
    assert notebook_launcher(jit_workers.train_zero2, ("SGD",), num_processes=2, use_cpu=True,
                             dashboard=False) == "prepared"  # before: "You are using an untested ZeRO Optimizer"
