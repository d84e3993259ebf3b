"""The kernel's side of the stall reports: current reports only, no progress, named by the idle verdict in both
summaries and by a timeout's error."""

from __future__ import annotations

import pytest

from notebook_accel.display.console import ConsoleSink
from notebook_accel.events import RankSystem, RunOutcome, Stalled, SystemSample
from notebook_accel.launcher.supervision.outcome import run_outcome
from notebook_accel.monitor.stalls import Stalls
from notebook_accel.widgets.system_state import SystemState

GIB = 1024**3
REDUCE = Stalled(0, "all_reduce", "accelerator.reduce", "/home/me/train.py", 14)
SLEEP = Stalled(1, "", "time.sleep", "/home/me/train.py", 9)


def _idle(seconds: int) -> list[SystemSample]:
    """Samples of two ranks at 1% CPU for ``seconds``."""
    return [SystemSample(float(t), (RankSystem(0, 1.0, GIB, GIB), RankSystem(1, 1.0, GIB, GIB)), GIB, 2 * GIB)
            for t in range(seconds + 1)]


def test_a_report_is_no_progress_and_the_verdict_names_it_in_both_summaries(
        capsys: pytest.CaptureFixture[str]) -> None:
    state, console = SystemState(), ConsoleSink()
    for event in [*_idle(4), REDUCE, SLEEP, *_idle(8)[5:]]:
        state.apply(event)
        console.handle(event)
    assert state.summary.idle.seconds() == 8.0  # the reports ended no stretch
    expected = ("every rank idle for 8 s: rank 0 waits in all_reduce (accelerator.reduce at train.py:14); rank 1 is "
                "not in a collective (time.sleep at train.py:9); a collective must be called on every rank")
    assert state.verdict() == expected
    state.end("timeout")
    console.finish(RunOutcome("timeout", 9.0, "the run did not finish within timeout=9.0s", (0, 1)))
    past = ("every rank idle for the last 8.0 s before the run was stopped: rank 0 waited in all_reduce "
            "(accelerator.reduce at train.py:14); rank 1 was not in a collective (time.sleep at train.py:9)")
    assert (state.verdict() or "").startswith(past) and f"Verdict: {past}" in capsys.readouterr().out


def test_a_rank_that_moved_on_is_no_longer_named() -> None:
    state = SystemState()
    for event in [*_idle(8), REDUCE, SLEEP, Stalled(1, "", "time.sleep", "/home/me/train.py", 9, stuck=False)]:
        state.apply(event)
    assert state.verdict() == "every rank idle for 8 s: rank 0 waits in all_reduce (accelerator.reduce at train.py:14)"
    state.apply(Stalled(0, "all_reduce", "accelerator.reduce", "/home/me/train.py", 14, stuck=False))
    assert (state.verdict() or "").startswith("every rank idle for 8 s (no CPU or GPU use: waiting")  # today's text


def test_the_line_of_a_notebook_cell_and_a_collective_called_by_its_own_name() -> None:
    stalls = Stalls()
    stalls.add(Stalled(0, "barrier", "dist.barrier", "Cell In[6]", 3))
    stalls.add(Stalled(1, "barrier", "", "/x/lib.py", 40))
    assert stalls.text() == "rank 0 waits in barrier (Cell In[6], line 3); rank 1 waits in barrier (lib.py:40)"


def test_a_timeouts_error_names_where_each_rank_waited_and_its_headline_stays_short() -> None:
    waits = "rank 0 waited in all_reduce (accelerator.reduce at train.py:14)"
    outcome, error = run_outcome(ranks=[0, 1], finished={}, failures={}, timed_out=True, saved=None, elsewhere=(),
                                 elapsed=10.4, timeout=10, waits=waits)
    assert outcome.error == "the run did not finish within timeout=10.0s (ranks still running: [0, 1])"
    assert str(error) == (f"the run did not finish within timeout=10.0s (ranks still running: [0, 1]); when it was "
                          f"stopped, {waits}. Raise timeout= if the work needs longer.")


def test_ranks_stopped_at_one_place_are_named_together_so_eight_ranks_fit_a_line() -> None:
    stalls = Stalls()
    for rank in range(8):
        if rank != 5:
            stalls.add(Stalled(rank, "all_reduce", "accelerator.reduce", "/home/me/train.py", 14))
    stalls.add(Stalled(5, "", "time.sleep", "/home/me/train.py", 9))
    assert stalls.text(past=True) == ("ranks 0, 1, 2, 3, 4, 6, 7 waited in all_reduce (accelerator.reduce at "
                                      "train.py:14); rank 5 was not in a collective (time.sleep at train.py:9); "
                                      "a collective must be called on every rank")
