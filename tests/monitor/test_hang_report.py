"""A hung run names what each rank is blocked in: real 2- and 3-process gloo runs that hang in known places until
their ``timeout=`` ends them, read back through both closing summaries (the console's and the notebook's) and the
timeout's error."""

from __future__ import annotations

from typing import Any

import pytest

from notebook_accel import LaunchTimeoutError, notebook_launcher
from notebook_accel.display.console import ConsoleSink
from notebook_accel.events import Stalled
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.snapshot import summary_html, summary_text
from tests.launcher.recording import RecordingSink
from tests.monitor import hang_workers, workers
from tests.monitor.hang_workers import line_of

HERE = "hang_workers.py"


def hang(function: Any, args: tuple[Any, ...], processes: int, timeout: float,
         capsys: pytest.CaptureFixture[str]) -> tuple[RecordingSink, str, str, str]:
    """Run ``function`` until its timeout; the recording, the timeout's error, the console's closing lines and the
    notebook's final result (as text)."""
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError) as raised:
        notebook_launcher(function, args, num_processes=processes, dashboard=sink, timeout=timeout)
    assert sink.info is not None and sink.outcome is not None and sink.outcome.status == "timeout"
    console, state = ConsoleSink(), RunState(sink.info)
    for event in sink.events:
        console.handle(event)
        state.apply(event)
    console.finish(sink.outcome)
    state.finish(sink.outcome)
    capsys.readouterr()  # the run's own output
    console.finish(sink.outcome)  # once more, alone: its closing lines
    said = capsys.readouterr()
    shown = summary_text(state, sink.outcome.elapsed)
    assert summary_html(state, sink.outcome.elapsed).count("waited in") == 1  # said once in the panel
    return sink, str(raised.value), said.out + said.err, shown


@pytest.mark.timeout(180)
def test_a_one_sided_all_reduce_names_who_waits_in_it_and_who_never_came(capsys: pytest.CaptureFixture[str]) -> None:
    # the issue: "every rank idle for 12 s (no CPU or GPU use: waiting, e.g. in a collective ...)" named neither
    # the collective nor the rank that never reached it
    sink, error, console, shown = hang(hang_workers.one_sided, ("reduce", 1), 2, 14, capsys)
    waits = f"rank 0 waited in all_reduce (accelerator.reduce at {HERE}:{line_of('reduce')})"
    absent = f"rank 1 was not in a collective (time.sleep at {HERE}:{line_of('sleep')})"
    for text in (error, console, shown):
        assert waits in text and absent in text, text
    verdict = next(line for line in console.splitlines() if line.startswith("Verdict:"))
    assert verdict.startswith("Verdict: every rank idle for the last ") and verdict.endswith(
        "a collective must be called on every rank"), verdict
    assert verdict[len("Verdict: "):] in shown
    assert [e.rank for e in sink.of_type(Stalled)] in ([0, 1], [1, 0])  # one report each, none taken back


@pytest.mark.timeout(180)
def test_a_barrier_on_three_ranks_names_the_two_that_wait_and_the_one_asleep(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, error, console, shown = hang(hang_workers.one_sided, ("wait_for_everyone", 1), 3, 14, capsys)
    assert f"ranks 0, 2 waited in barrier (accelerator.wait_for_everyone at {HERE}:{line_of('barrier')})" \
        in error  # ranks stopped at one place are named together
    assert f"rank 1 was not in a collective (time.sleep at {HERE}:{line_of('sleep')})" in error
    assert "ranks 0, 2 waited in barrier" in console and "ranks 0, 2 waited in barrier" in shown


@pytest.mark.timeout(180)
def test_a_ddp_rank_that_stops_stepping_leaves_the_other_in_ddps_gradient_all_reduce(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, error, console, shown = hang(hang_workers.ddp_rank_stops_stepping, (), 2, 16, capsys)
    waits = f"rank 0 waited in DDP's gradient all-reduce (accelerator.backward at {HERE}:{line_of('backward')})"
    for text in (error, console, shown):
        assert waits in text, text
        assert f"rank 1 was not in a collective (time.sleep at {HERE}:{line_of('stopped')})" in text


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["sleepy", "one_long_call", "one_long_torch_call"])
def test_a_healthy_run_sends_no_stall_report(kind: str) -> None:
    # a loop sleeping 0.3 s a step (next to no CPU, the same line most of the time), a rank computing for seconds
    # in one C call that holds the GIL, and one in a torch call that releases it (the same place all along, the
    # watch looking on): none is a stall
    sink = RecordingSink()
    if kind == "sleepy":
        notebook_launcher(workers.sleepy_training, (5.0, 0.3), num_processes=2, dashboard=sink)
    else:
        notebook_launcher(getattr(hang_workers, kind), (8.0,), num_processes=2, dashboard=sink)  # 4-8 s
    assert sink.outcome is not None and sink.outcome.status == "finished"
    assert sink.of_type(Stalled) == []
