"""The GPU's DDP wait in the step clock, with a stand-in for torch's DDP logger (the real one: tests/gpu)."""

from __future__ import annotations

import time
from typing import Any

from notebook_accel.events import StepTimes
from notebook_accel.monitor.collectives import GpuWait
from notebook_accel.monitor.steps import StepClock


class FakeGpuDdp:
    """A DDP model on a GPU whose logger's latest sample and running mean are set by the test (nanoseconds)."""

    device_type = "cuda"

    def __init__(self) -> None:
        self.sample: dict[str, int] = {}
        self.mean = (0, 0)

    def _get_ddp_logging_data(self) -> dict[str, Any]:
        return {**self.sample, "avg_backward_comm_time": self.mean[0],
                "avg_backward_compute_comm_overlap_time": self.mean[1]}


def _sample(iteration: int, comm_ms: float, overlap_ms: float) -> dict[str, int]:
    return {"iteration": iteration, "backward_comm_time": int(comm_ms * 1e6),
            "backward_compute_comm_overlap_time": int(overlap_ms * 1e6)}


def test_a_gpu_wait_longer_than_the_cpus_backward_is_not_cut_to_it() -> None:
    # seen on an H100: the CPU queued forward and backward in 3.4 ms, the step waited 10 ms for the last bucket;
    # the figure was cut to the CPU's 3.4 ms
    model = FakeGpuDdp()
    model.sample, model.mean = _sample(5, comm_ms=10.0, overlap_ms=0.0), (10_000_000, 0)
    sent: list[StepTimes] = []
    clock = StepClock(0, sent.append, warmup=0)
    clock.watch(model)
    now = time.perf_counter()  # steps of 15 ms from now on: the clock's forward+backward reads the 2 ms given
    for _ in range(10):
        clock.batch_ready(0.0, now=now)
        clock.backward_begins(None)
        clock.backward(0.002)
        now += 0.015  # a 15 ms step, the CPU's forward+backward about 2 ms of it
    clock.batch_ready(0.0, now=now)
    clock.flush()
    assert sent and sent[0].steps == 10
    assert abs(sent[0].comm_seconds / sent[0].steps - 0.010) < 1e-6, sent[0]


def test_the_wait_is_never_more_than_the_step() -> None:
    model = FakeGpuDdp()
    model.sample = _sample(5, comm_ms=50.0, overlap_ms=0.0)  # a stale sample from a slow moment
    sent: list[StepTimes] = []
    clock = StepClock(0, sent.append, warmup=0)
    clock.watch(model)
    clock.batch_ready(0.0, now=0.0)
    clock.backward(0.002)
    clock.batch_ready(0.004, now=0.02)
    clock.flush()
    assert sent[0].comm_seconds <= sent[0].step_seconds - sent[0].data_seconds + 1e-9


def test_the_first_iterations_are_left_out_of_the_mean() -> None:
    # torch's running mean starts with the bucket rebuild and stays dominated by it for hundreds of steps
    model, wait = FakeGpuDdp(), GpuWait()
    model.mean = (40_000_000, 0)
    model.sample = _sample(1, comm_ms=80.0, overlap_ms=0.0)
    assert abs(wait.read(model) - 0.040) < 1e-9  # nothing fresh yet: torch's mean
    for iteration, comm in ((3, 4.0), (4, 6.0), (4, 6.0), (100, 5.0)):  # the same sample read twice counts once
        model.sample = _sample(iteration, comm_ms=comm, overlap_ms=1.0)
        wait.read(model)
    assert abs(wait.read(model) - 0.004) < 1e-9  # (3 + 5 + 4) / 3 ms


def test_a_model_without_the_logger_reads_no_wait() -> None:
    class Broken(FakeGpuDdp):
        def _get_ddp_logging_data(self) -> dict[str, Any]:
            raise RuntimeError("no logger")

    assert GpuWait().read(Broken()) == 0.0
