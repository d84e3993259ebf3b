"""Tests for notebook_accel.channel: ordering, batching and closing of the worker's event writer."""

from __future__ import annotations

import multiprocessing as mp
import time

from notebook_accel import channel
from notebook_accel.events import Finished, Log, Metrics


def _collect(reader, until: float) -> list:  # type: ignore[no-untyped-def]
    out: list = []
    while time.monotonic() < until and reader.poll(0.05):
        out.extend(channel.read_events(reader))
    return out


def test_send_keeps_posted_events_in_order() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=10.0)
    writer.post(Metrics(0, 1, {"loss": 1.0}, 0.0))
    writer.post(Metrics(0, 2, {"loss": 0.5}, 0.0))
    writer.send(Finished(0, 42))
    events = channel.read_events(reader)
    assert [type(e).__name__ for e in events] == ["Metrics", "Metrics", "Finished"]
    assert events[-1].value == 42
    writer.close()
    reader.close()


def test_posted_events_arrive_by_the_flush_timer() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=0.02)
    for step in range(100):
        writer.post(Metrics(0, step, {"loss": float(step)}, 0.0))
    got = _collect(reader, time.monotonic() + 5.0)
    assert [e.step for e in got] == list(range(100))
    writer.close()
    reader.close()


def test_close_flushes_and_is_idempotent() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=10.0)
    writer.post(Log(0, "stdout", "last words"))
    writer.close()
    writer.close()
    assert channel.read_events(reader) == [Log(0, "stdout", "last words")]
    reader.close()


def test_install_and_uninstall() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn)
    assert channel.current() is None
    channel.install(writer)
    try:
        assert channel.current() is writer
    finally:
        assert channel.uninstall() is writer
    assert channel.current() is None
    writer.close()
    reader.close()


def test_tensor_survives_the_sender_exiting_at_once() -> None:
    """A worker sends its result and calls os._exit: the tensor must travel by value, not as a shm handle."""
    import os

    import torch
    import torch.multiprocessing  # noqa: F401 - registers torch's shared-memory reductions, as in a real worker

    reader, conn = mp.Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            reader.close()
            channel.EventWriter(conn).send(Finished(0, {"weights": torch.arange(6.0).reshape(2, 3)}))
        finally:
            os._exit(0)
    conn.close()
    os.waitpid(pid, 0)
    (event,) = channel.read_events(reader)
    assert torch.equal(event.value["weights"], torch.arange(6.0).reshape(2, 3))
    reader.close()


def test_dumps_refuses_unpicklable_values() -> None:
    import pytest

    with pytest.raises(Exception, match="lambda|pickle"):
        channel.dumps(Finished(0, lambda: 1))
