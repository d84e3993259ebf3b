"""The console sink: first line, whole output lines, rank prefixes, throttled progress/metrics, closing line."""

from __future__ import annotations

import pytest

from notebook_accel.events import Log, Metrics, Progress, RunInfo, RunOutcome, Sink
from notebook_accel.launcher.console import ConsoleSink, describe_launch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_describe_launch() -> None:
    assert describe_launch(RunInfo(2, ("cpu", "cpu"), "gloo", "train")) == "Launching 2 processes on CPU (gloo)"
    assert (
        describe_launch(RunInfo(1, ("cuda:1",), "nccl", "train", mixed_precision="fp16"))
        == "Launching 1 process on 1 GPU [1] (nccl), mixed precision fp16"
    )
    assert describe_launch(RunInfo(1, ("cpu",), "none", "train")) == (
        "Running train in this process on CPU (num_processes=1: no fork)"
    )


def test_is_a_sink() -> None:
    assert isinstance(ConsoleSink(), Sink)


def test_main_process_lines_whole_others_errors_prefixed(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink()
    sink.start(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
    sink.handle(Log(0, "stdout", "epoch 1\nepoch 2"))
    sink.handle(Log(0, "stderr", "a warning"))
    sink.handle(Log(1, "stdout", "rank one chatter"))
    sink.handle(Log(1, "stderr", "rank one warning\nsecond"))
    out, err = capsys.readouterr()
    assert out == "Launching 2 processes on CPU (gloo)\nepoch 1\nepoch 2\n"
    assert err == "a warning\n[rank 1] rank one warning\n[rank 1] second\n"


def test_show_all_ranks_prefixes_everything(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink(show_all_ranks=True)
    sink.handle(Log(0, "stdout", "zero"))
    sink.handle(Log(1, "stdout", "one"))
    assert capsys.readouterr().out == "[rank 0] zero\n[rank 1] one\n"


def test_progress_is_throttled_and_ends_complete(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    sink = ConsoleSink(clock=clock, progress_interval=1.0)
    for n in range(0, 11):
        clock.now = n * 0.25
        sink.handle(Progress(0, n, 10, "train", time=n * 0.25))
    sink.handle(Progress(1, 5, 10, "train", time=0.0))  # other ranks are not shown
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("train: 0/10 [0%]")
    assert lines[-1] == "train: 10/10 [100%] 4.0 it/s"
    assert len(lines) == 4  # t=0, 1.0, 2.0, and the final one at 2.5


def test_a_loader_progress_line_names_its_epoch_and_each_epoch_has_its_own_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sink = ConsoleSink(clock=Clock(), progress_interval=100.0)
    sink.handle(Progress(0, 0, 4, "train", 0.0, 1, "loader"))
    sink.handle(Progress(0, 4, 4, "train", 2.0, 1, "loader"))
    sink.handle(Progress(0, 0, 4, "train", 10.0, 2, "loader"))
    sink.handle(Progress(0, 4, 4, "train", 11.0, 2, "loader"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "train epoch 1: 4/4 [100%] 2.0 it/s" and lines[-1] == "train epoch 2: 4/4 [100%] 4.0 it/s"


def test_metrics_line_at_most_every_interval(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    sink = ConsoleSink(clock=clock, metrics_interval=5.0)
    for step in range(12):
        clock.now = float(step)
        sink.handle(Metrics(0, step, {"loss": 1.0 / (step + 1)}, time=float(step)))
    assert capsys.readouterr().out.splitlines() == ["step 0: loss=1", "step 5: loss=0.1667", "step 10: loss=0.09091"]


def test_a_metrics_line_shows_twenty_values_and_counts_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    ConsoleSink(clock=Clock()).handle(Metrics(0, 3, {f"m{i}": float(i) for i in range(10_000)}, time=0.0))
    line = capsys.readouterr().out.strip()
    assert line.startswith("step 3: m0=0, m1=1,") and line.endswith("m19=19, and 9980 more") and len(line) < 400


@pytest.mark.parametrize(
    ("outcome", "stream", "text"),
    [
        (RunOutcome("finished", 1.23), "out", "Finished in 1.2 s\n"),
        (RunOutcome("failed", 2.0, "rank 1: ValueError: x", (1,)), "err", "Failed after 2.0 s: rank 1: ValueError: x\n"),
        (RunOutcome("timeout", 5.0, "too slow"), "err", "Timed out after 5.0 s: too slow\n"),
        (RunOutcome("interrupted", 0.5, "interrupted"), "err", "Interrupted after 0.5 s\n"),
    ],
)
def test_closing_line(outcome: RunOutcome, stream: str, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    ConsoleSink().finish(outcome)
    captured = capsys.readouterr()
    assert getattr(captured, stream) == text
