"""Where each step's time goes, and the verdict: real 2-process runs built to be slow for one clear reason."""

from __future__ import annotations

import pytest

from notebook_accel import notebook_launcher
from notebook_accel.events import StepTimes
from notebook_accel.monitor.verdict import StepBreakdown, verdict
from tests.engines.deepspeed import needs_deepspeed
from tests.launcher.recording import RecordingSink
from tests.monitor import workers


def breakdown_of(kind: str) -> StepBreakdown:
    sink = RecordingSink()
    notebook_launcher(workers.train_case, (kind,), num_processes=2, dashboard=sink)
    breakdown = StepBreakdown()
    for event in sink.of_type(StepTimes):
        breakdown.add(event)  # type: ignore[arg-type]
    assert set(breakdown.ranks) == {0, 1} and all(r.steps >= 5 for r in breakdown.ranks.values())
    return breakdown


@pytest.mark.timeout(180)
def test_a_slow_dataset_is_named_data_bound() -> None:
    found = verdict(breakdown_of("data"))
    assert found is not None and found.startswith("data-bound: every rank waits") and "num_workers (now 0)" in found


@pytest.mark.timeout(180)
def test_many_parameters_and_a_tiny_batch_are_named_communication_bound() -> None:
    breakdown = breakdown_of("comm")
    found = verdict(breakdown)
    assert found is not None and found.startswith("communication-bound:"), (found, breakdown.lines())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["fsdp_comm", pytest.param("deepspeed_comm", marks=needs_deepspeed)])
def test_sharded_engines_collectives_count_as_communication(kind: str) -> None:
    breakdown = breakdown_of(kind)
    shares = [r.split()["comm"] for r in breakdown.ranks.values()]
    assert min(shares) > 0.2, breakdown.lines()  # before FSDP's collectives were timed: communication 0%
    found = verdict(breakdown)
    # on a loaded machine the share can fall under the verdict's bar (39-44% seen under DeepSpeed), where saying
    # nothing is right; any other verdict is wrong
    assert found is None or found.startswith("communication-bound:"), (found, breakdown.lines())


@pytest.mark.timeout(180)
def test_a_rank_that_sleeps_is_named_the_straggler() -> None:
    breakdown = breakdown_of("straggler")
    found = verdict(breakdown)
    assert found is not None and found.startswith("rank 1 is a straggler"), (found, breakdown.lines())


@pytest.mark.timeout(180)
def test_a_balanced_compute_bound_run_gets_no_verdict() -> None:
    breakdown = breakdown_of("balanced")
    assert verdict(breakdown) is None, breakdown.lines()
    split = breakdown.ranks[0].split()
    assert split["compute"] > 0.5 and abs(sum(split.values()) - 1) < 0.1


def test_too_few_steps_or_a_gpu_idle() -> None:
    few = StepBreakdown()
    few.add(StepTimes(0, 3, 3.0, 2.0, 0.5, 0.3, 0.0, 0.1))
    assert verdict(few) is None
    fine = StepBreakdown()
    fine.add(StepTimes(0, 10, 10.0, 0.5, 8.0, 4.0, 0.5, 0.5))
    assert verdict(fine) is None
    assert verdict(fine, {0: 31.0}) == "rank 0's GPU is busy only 31% of the time"


def test_a_rank_slower_by_noise_in_a_run_where_everyone_waits_is_no_straggler() -> None:
    noisy = StepBreakdown()  # the communication-bound run on a loaded machine: rank 0's work 1.4x, both wait a lot
    noisy.add(StepTimes(0, 10, 3.4, 0.0, 1.4, 1.0, 2.0, 0.4))
    noisy.add(StepTimes(1, 10, 3.4, 0.0, 1.0, 0.8, 2.4, 0.4))
    found = verdict(noisy)
    assert found is not None and found.startswith("communication-bound: 59%"), found
