"""Where each step's time goes, and the verdict: real 2-process runs built to be slow for one clear reason."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from notebook_accel import LaunchTimeoutError, notebook_launcher
from notebook_accel.display.console import ConsoleSink
from notebook_accel.events import RankSystem, StepTimes, SystemSample
from notebook_accel.monitor.idle import IDLE_SECONDS
from notebook_accel.monitor.summary import SystemSummary
from notebook_accel.monitor.verdict import StepBreakdown, verdict
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.snapshot import summary_html, summary_text
from tests.engines.deepspeed import needs_deepspeed
from tests.launcher.recording import RecordingSink
from tests.monitor import workers

GIB = 1024**3


def run_of(function: Callable[..., Any], *args: Any) -> tuple[StepBreakdown, Any, set[str | None]]:
    """Launch ``function(*args)`` on 2 processes; every rank's step times, rank 0's result, and each verdict the
    run showed on the way (the panel shows it live, after each report: a wrong one misleads at any moment)."""
    sink = RecordingSink()
    result = notebook_launcher(function, args, num_processes=2, dashboard=sink)
    breakdown = StepBreakdown()
    shown: set[str | None] = set()
    for event in sink.of_type(StepTimes):
        breakdown.add(event)  # type: ignore[arg-type]
        shown.add(verdict(breakdown))
    assert set(breakdown.ranks) == {0, 1} and all(r.steps >= 5 for r in breakdown.ranks.values())
    return breakdown, result, shown


def breakdown_of(kind: str) -> StepBreakdown:
    breakdown, _, _ = run_of(workers.train_case, kind)
    return breakdown


@pytest.mark.timeout(180)
def test_a_slow_dataset_is_named_data_bound() -> None:
    found = verdict(breakdown_of("data"))
    assert found is not None and found.startswith("data-bound: every rank waits") and "num_workers (now 0)" in found


@pytest.mark.timeout(180)
def test_many_parameters_and_a_tiny_batch_are_named_communication_bound() -> None:
    breakdown = breakdown_of("comm")
    found = verdict(breakdown)
    # the wait counted is a lower bound (the all-reduce that overlaps backward also slows it on a shared CPU): on a
    # loaded 2-core machine one rank's share can fall under the bar (24% and 48% seen), where saying nothing is
    # right; any other verdict is wrong, and the waits must show (a share over 20%, 0-5% in compute-bound runs)
    assert found is None or found.startswith("communication-bound:"), (found, breakdown.lines())
    assert max(r.split()["comm"] for r in breakdown.ranks.values()) > 0.2, breakdown.lines()


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


@pytest.mark.timeout(300)
def test_a_compute_bound_ddp_run_is_called_communication_bound_only_when_it_is() -> None:
    # the case: DDP's own figure (first bucket sent to the last one back, overlapping backward) said
    # communication-bound in 7 of 7 runs while the step lost 0-39% to the all-reduce; the real share is measured
    # here with and without no_sync, after the monitored steps
    breakdown, real, shown = run_of(workers.compute_bound_ddp, 12, 9)
    for found in shown:
        assert found is None or (found.startswith("communication-bound:") and min(real) >= 0.3), (
            found, breakdown.lines(), [f"real communication share {share:.0%}" for share in real])


@pytest.mark.timeout(300)
def test_two_equally_slow_loaders_are_data_bound_and_no_rank_a_straggler() -> None:
    breakdown, _, shown = run_of(workers.twin_slow_loaders)
    for found in shown:  # both ranks wait for data; which one waits a little longer is chance: no straggler
        assert found is None or (found.startswith("data-bound:") and "num_workers (now 1)" in found), (
            found, breakdown.lines())
    assert all(r.split()["data"] > 0.15 for r in breakdown.ranks.values()), breakdown.lines()


def test_a_rank_slowed_by_load_in_a_communication_heavy_run_is_no_straggler() -> None:
    loaded = StepBreakdown()  # seen under load in the communication-bound case: rank 1 waits 54%, rank 0's work 1.6x
    loaded.add(StepTimes(0, 10, 7.69, 0.0, 6.3, 5.0, 2.0, 0.7))
    loaded.add(StepTimes(1, 10, 7.69, 0.0, 7.07, 5.0, 4.15, 0.5))
    assert verdict(loaded) is None


def test_a_rank_waiting_for_data_has_no_straggling_own_work() -> None:
    waits = StepBreakdown()  # rank 0 waits longer for data; rank 1 waits for it in the all-reduce
    waits.add(StepTimes(0, 10, 10.0, 6.0, 3.0, 2.0, 0.2, 0.5))
    waits.add(StepTimes(1, 10, 10.0, 3.5, 5.8, 2.0, 3.0, 0.5))
    found = verdict(waits)
    assert found is not None and found.startswith("data-bound: every rank waits 60%"), found


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


@pytest.mark.timeout(180)
def test_a_hang_is_named_every_rank_idle_not_no_verdict() -> None:
    # the issue: both ranks at 0-1% CPU in a hang, and the panel said "nothing clearly slows the run down"
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(workers.hang_in_all_reduce, num_processes=2, dashboard=sink, timeout=15)
    summary = SystemSummary()
    for sample in sink.of_type(SystemSample):
        summary.add(sample)  # type: ignore[arg-type]
    found = verdict(StepBreakdown(), summary.gpu_means(), summary.idle.seconds())
    assert found is not None and found.startswith("every rank idle for"), (found, summary.lines())


@pytest.mark.timeout(180)
def test_a_run_ended_by_its_timeout_while_every_rank_waited_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # the issue: a hang ended by timeout= before 5 s of idleness closed with "no verdict: nothing clearly slowed
    # the run down"; here both ranks compute, then wait for the last 4.5 s until timeout=8 stops them (the samples
    # show 2.5 to 4.5 s of it: under the 5 s a live verdict needs)
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(workers.busy_then_hang, (8.0, 4.5), num_processes=2, dashboard=sink, timeout=8)
    assert sink.info is not None and sink.outcome is not None and sink.outcome.status == "timeout"
    summary = SystemSummary()
    for sample in sink.of_type(SystemSample):
        summary.add(sample)  # type: ignore[arg-type]
    assert 2.0 <= summary.idle.seconds() < IDLE_SECONDS, summary.idle.seconds()  # below the live threshold
    assert verdict(StepBreakdown(), summary.gpu_means(), summary.idle.seconds()) is None  # what it said live
    console, state = ConsoleSink(), RunState(sink.info)  # the two closing summaries: text, and the notebook's
    for event in sink.events:
        console.handle(event)
        state.apply(event)
    console.finish(sink.outcome)
    state.finish(sink.outcome)
    said = re.search(r"Verdict: every rank idle for the last (\d+\.\d) s before the run was stopped",
                     capsys.readouterr().out)
    assert said is not None and float(said.group(1)) == round(summary.idle.seconds(), 1)
    shown = summary_html(state, sink.outcome.elapsed)
    assert f"every rank idle for the last {said.group(1)} s before the run was stopped" in shown
    assert "no verdict" not in shown and said.group(0).lower() in summary_text(state, sink.outcome.elapsed)
    assert "mem</span> 0.0 GiB" not in shown and " yet" not in shown  # the ranks ended: their last live figures


@pytest.mark.timeout(180)
def test_a_loop_that_sleeps_through_its_steps_is_not_called_idle(capsys: pytest.CaptureFixture[str]) -> None:
    # seen in JupyterLab: a loop sleeping 0.15 s a step (2-4% CPU) for 14 s, steps and metrics all along, closed
    # with "every rank idle for 8 s (... a collective that a rank never reaches ...)": a hang that was not there
    sink = RecordingSink()
    steps = notebook_launcher(workers.sleepy_training, (9.0, 0.3), num_processes=2, dashboard=sink)
    assert steps > 10 and sink.outcome is not None
    summary = SystemSummary()
    for sample in sink.of_type(SystemSample):
        summary.add(sample)  # type: ignore[arg-type]
    assert summary.idle.seconds() >= IDLE_SECONDS, summary.lines()  # the CPU alone says idle: the case in question
    console, state = ConsoleSink(), RunState(sink.info)  # type: ignore[arg-type]
    for event in sink.events:
        console.handle(event)
        state.apply(event)
    console.finish(sink.outcome)
    state.finish(sink.outcome)
    out = capsys.readouterr().out
    assert "idle for" not in out, out[-2000:]
    assert "idle for" not in summary_html(state, sink.outcome.elapsed)


def test_progress_ends_an_idle_stretch_in_both_summaries() -> None:
    from notebook_accel.widgets.system_state import SystemState

    state, console = SystemState(), ConsoleSink()
    for t in range(9):  # 1% CPU, 8 s: idle by the CPU
        sample = SystemSample(float(t), (RankSystem(0, 1.0, GIB, GIB), RankSystem(1, 1.0, GIB, GIB)), GIB, 2 * GIB)
        state.apply(sample)
        console.handle(sample)
    assert state.summary.idle.seconds() == 8.0 and console._summary.idle.seconds() == 8.0
    said = state.verdict()
    assert said is not None and said.startswith("every rank idle for 8 s"), said
    state.apply(StepTimes(0, 6, 1.0, 0.0, 0.02, 0.01, 0.0, 0.0))
    console.handle(StepTimes(0, 6, 1.0, 0.0, 0.02, 0.01, 0.0, 0.0))
    assert state.summary.idle.seconds() == 0.0 and console._summary.idle.seconds() == 0.0
    assert state.verdict() is None


def test_a_sample_taken_after_every_rank_ended_neither_ends_nor_lengthens_the_idle_stretch() -> None:
    summary = SystemSummary()
    for t, cpu in ((0.0, 90.0), (1.0, 1.0), (2.0, 0.0), (3.0, 0.0)):
        summary.add(SystemSample(t, (RankSystem(0, cpu, GIB, GIB), RankSystem(1, cpu, GIB, GIB)), GIB, 2 * GIB))
    summary.add(SystemSample(4.0, (RankSystem(0, 0.0, 0, GIB), RankSystem(1, 0.0, 0, GIB)), GIB, 2 * GIB))  # gone
    assert summary.idle.seconds() == 3.0
    assert verdict(StepBreakdown(), None, summary.idle.seconds()) is None  # live: too short
    said = verdict(StepBreakdown(), None, summary.idle.seconds(), stopped=True)
    assert said is not None and said.startswith("every rank idle for the last 3.0 s before the run was stopped (")
    assert verdict(StepBreakdown(), None, 1.9, stopped=True) is None  # one sample interval is no stretch


def test_a_rank_busy_again_ends_the_idle_verdict() -> None:
    breakdown = StepBreakdown()
    breakdown.add(StepTimes(0, 10, 10.0, 0.5, 8.0, 4.0, 0.5, 0.5))  # a fine run so far
    waits = "rank 0 waits in all_reduce (train.py:3)"
    assert verdict(breakdown, None, 6.0, waits) == f"every rank idle for 6 s: {waits}"
    assert verdict(breakdown, None, 4.0) is None  # too short to say
