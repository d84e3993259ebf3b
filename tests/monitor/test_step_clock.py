"""The step clock's figures from the loader's per-batch calls: what a step counts, and what it leaves out."""

from __future__ import annotations

import time

from notebook_accel.events import StepTimes
from notebook_accel.monitor.steps import StepClock


def test_a_step_counts_its_own_phases_and_batches_without_backward_leave_nothing_behind() -> None:
    sent: list[StepTimes] = []
    clock = StepClock(0, sent.append, warmup=0)
    base = time.perf_counter() - 10.0  # fixed times in the past: backward reads the real clock
    clock.batch_ready(9.0, now=base)  # the first batch: no step before it
    clock.backward(0.25)
    clock.optimizer(0.125)
    clock.batch_ready(0.0625, now=base + 1.0)  # a training step ends: 1 s, 0.0625 s of it waiting for data
    clock.batch_ready(0.5, now=base + 2.0)  # an evaluation batch: not a step
    clock.optimizer(0.5)  # an optimizer step without backward: not counted, and not carried into the next step
    clock.batch_ready(0.5, now=base + 3.0)
    clock.backward(0.25)
    clock.end_of_epoch()  # the last step ends with the loader: no wait for a next batch
    assert len(sent) == 1
    times = sent[0]
    assert (times.steps, times.data_seconds, times.backward_seconds, times.optimizer_seconds) == (2, 0.0625, 0.5,
                                                                                                   0.125)
    assert 1.0 + 7.0 <= times.step_seconds < 1.0 + 10.0
