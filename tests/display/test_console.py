"""The console sink: first line, whole output lines, rank prefixes, throttled progress/metrics, closing line."""

from __future__ import annotations

import pytest

from notebook_accel.events import Log, Metrics, Progress, RunInfo, RunOutcome, Sink
from notebook_accel.display.console import ConsoleSink, describe_launch


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
    assert lines[1] == "train epoch index 0: 4/4 [100%] 2.0 it/s" and lines[-1] == "train epoch index 1: 4/4 [100%] 4.0 it/s"


def test_a_fresh_loader_under_the_same_name_has_its_own_rate(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink(clock=Clock(), progress_interval=100.0)  # HF Trainer prepares a new eval loader each time
    sink.handle(Progress(0, 1, 4, "eval", 0.0, 1, "loader"))
    sink.handle(Progress(0, 4, 4, "eval", 3.0, 1, "loader"))
    sink.handle(Progress(0, 1, 4, "eval", 100.0, 1, "loader"))  # the next evaluation's loader, epoch 1 again
    sink.handle(Progress(0, 4, 4, "eval", 106.0, 1, "loader"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "eval epoch index 0: 4/4 [100%] 1.0 it/s" and lines[-1] == "eval epoch index 0: 4/4 [100%] 2.0 s/it"


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
        (RunOutcome("finished", 1.23), "out", "Finished in 1.2s\n"),
        (RunOutcome("failed", 2.0, "rank 1: ValueError: x", (1,)), "err", "Failed after 2.0s: rank 1: ValueError: x\n"),
        (RunOutcome("timeout", 5.0, "too slow"), "err", "Timed out after 5.0s: too slow\n"),
        (RunOutcome("interrupted", 0.5, "interrupted"), "err", "Interrupted after 0.5s\n"),
    ],
)
def test_closing_line(outcome: RunOutcome, stream: str, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    ConsoleSink().finish(outcome)
    captured = capsys.readouterr()
    assert getattr(captured, stream) == text


def test_system_samples_make_a_line_every_interval_and_a_closing_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from notebook_accel.events import RankSystem, SystemSample

    gib = 1024**3
    clock = Clock()
    sink = ConsoleSink(clock=clock, system_interval=30.0)
    for second in range(61):
        clock.now = float(second)
        gpu = {"gpu_utilization": 80.0 + second % 2 * 10, "gpu_memory_used": 30 * gib, "gpu_memory_total": 80 * gib,
               "gpu_peak_memory": 31 * gib, "gpu_temperature": 64.0, "gpu_power_watts": 310.0}
        ranks = (RankSystem(0, 100.0, gib, 2 * gib, **gpu), RankSystem(1, 50.0, gib // 2, gib, **gpu))
        sink.handle(SystemSample(float(second), ranks, 17 * gib, 24 * gib))
    sink.finish(RunOutcome("finished", 61.0))
    lines = capsys.readouterr().out.splitlines()
    system = [line for line in lines if line.startswith("system: ")]
    assert len(system) == 2  # at 30 s and 60 s: a line every half minute, not a flood
    assert system[0] == ("system: rank 0 cpu 100% 1.0 GiB, gpu 80% 30.0 GiB/80.0 GiB 64°C 310 W · rank 1 cpu 50% "
                         "0.5 GiB, gpu 80% 30.0 GiB/80.0 GiB 64°C 310 W · machine 17.0 GiB free")
    assert lines[-2] == ("System: rank 0: mean CPU 100%, peak memory 2.0 GiB, mean GPU 85%, peak GPU memory 31.0 GiB; "
                         "rank 1: mean CPU 50%, peak memory 1.0 GiB, mean GPU 85%, peak GPU memory 31.0 GiB")


def test_the_closing_lines_give_each_ranks_step_split_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    from notebook_accel.events import StepTimes

    sink = ConsoleSink(clock=Clock())
    for rank in (0, 1):  # 10 steps of 100 ms, 60 ms of them waiting for data
        sink.handle(StepTimes(rank, 10, 1.0, 0.6, 0.3, 0.2, 0.05, 0.05, loader_workers=2))
    sink.finish(RunOutcome("finished", 2.0))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == ("Steps: rank 0: 100 ms a step: data 60%, compute 25%, communication 5%, optimizer 5%, other "
                         "5%; rank 1: 100 ms a step: data 60%, compute 25%, communication 5%, optimizer 5%, other 5%")
    assert lines[-2] == ("Verdict: data-bound: every rank waits 60% of each step for its DataLoader; raise num_workers "
                         "(now 2) or make loading cheaper")
    assert lines[-1] == "Finished in 2.0s"


def test_a_metrics_batch_prints_its_latest_values_at_most_every_interval(capsys: pytest.CaptureFixture[str]) -> None:
    from notebook_accel.metrics_batch import pack

    clock = Clock()
    sink = ConsoleSink(clock=clock, metrics_interval=5.0)
    for first in (0, 100, 200):
        clock.now = {0: 0.0, 100: 2.0, 200: 6.0}[first]
        [batch] = pack([Metrics(0, s, {"loss": 1.0 / (s + 1)}, float(s)) for s in range(first, first + 100)])
        sink.handle_metrics(batch)
    [other] = pack([Metrics(1, s, {"loss": 0.0}, 0.0) for s in range(3)])
    clock.now = 100.0
    sink.handle_metrics(other)  # another rank's: not printed
    assert capsys.readouterr().out.splitlines() == ["step 99: loss=0.01", "step 299: loss=0.003333"]
