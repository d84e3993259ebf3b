"""Tests for notebook_accel.tracking.live: metrics travel through a real channel, in process and from a fork."""

from __future__ import annotations

import multiprocessing as mp
import warnings
from multiprocessing.connection import Connection

import pytest
import torch

from notebook_accel import channel
from notebook_accel.events import Metrics
from notebook_accel.tracking.live import LiveTracker
from tests.tracking.conftest import Channel


def test_without_a_channel_log_does_nothing() -> None:
    tracker = LiveTracker(rank=0)
    assert not tracker.active and tracker.tracker is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.log({"loss": 1.0, "text": "ignored silently: nothing is sent anyway"}, step=1)
    tracker.finish()


def test_log_posts_one_metrics_event(live_channel: Channel) -> None:
    tracker = LiveTracker(rank=0)
    assert tracker.active and tracker.tracker is live_channel.writer
    tracker.log({"train/loss": torch.tensor(0.5), "lr": 1e-3}, step=7)
    tracker.log({"train/loss": 0.25})
    tracker.finish()
    events = live_channel.drain()
    assert all(isinstance(e, Metrics) for e in events)
    assert [(e.rank, e.step, e.values) for e in events] == [
        (0, 7, {"train/loss": 0.5, "lr": 1e-3}),
        (0, None, {"train/loss": 0.25}),
    ]
    assert events[0].time > 0


def test_non_scalars_are_skipped_with_one_warning(live_channel: Channel) -> None:
    tracker = LiveTracker(rank=0)
    with pytest.warns(UserWarning, match="hist"):
        tracker.log({"hist": torch.ones(4), "loss": 1.0}, step=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.log({"hist": torch.ones(4)}, step=1)  # nothing scalar left: no event, no second warning
    events = live_channel.drain(timeout=0.5)
    assert [e.values for e in events] == [{"loss": 1.0}]


def _forked_logger(conn: Connection, steps: int) -> None:
    """Worker body: install a channel like the launcher does and log ``steps`` metrics."""
    writer = channel.EventWriter(conn, flush_interval=0.01)
    channel.install(writer)
    tracker = LiveTracker(rank=0)
    for step in range(steps):
        tracker.log({"train/loss": 1.0 / (step + 1)}, step=step)
    tracker.finish()
    writer.close()


@pytest.mark.timeout(60)
def test_metrics_from_a_forked_worker_arrive_in_order() -> None:
    ctx = mp.get_context("fork")
    reader, conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_forked_logger, args=(conn, 500))
    proc.start()
    conn.close()
    events = []
    try:
        while True:
            events.extend(channel.read_events(reader))
    except EOFError:
        pass
    proc.join(30)
    reader.close()
    assert proc.exitcode == 0
    assert [e.step for e in events] == list(range(500))
    assert events[-1].values == {"train/loss": 1.0 / 500}


@pytest.mark.timeout(60)
def test_finish_racing_the_flusher_thread_loses_and_reorders_nothing(live_channel: Channel) -> None:
    import threading

    received: list[Metrics] = []

    def read() -> None:
        try:
            while True:
                received.extend(channel.read_events(live_channel.reader))  # type: ignore[arg-type]
        except (EOFError, OSError):
            pass

    reader_thread = threading.Thread(target=read, daemon=True)
    reader_thread.start()
    tracker = LiveTracker(rank=0)
    for step in range(20_000):
        tracker.log({"x": float(step)}, step)
        if step % 50 == 0:
            tracker.finish()  # flushes from this thread while the flusher thread flushes too
    tracker.finish()
    live_channel.writer.close()
    reader_thread.join(30)
    assert [e.step for e in received] == list(range(20_000))
