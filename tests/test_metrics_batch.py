"""Tests for notebook_accel.metrics_batch: a flush's metrics travel as one batch, every value kept, in order."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import pickletools
import threading

import pytest

from notebook_accel import channel
from notebook_accel.events import Finished, Metrics, Progress
from notebook_accel.display.base import BaseSink
from notebook_accel.metrics_batch import NO_STEP, MetricsBatch, pack


def _flush_message(events: list) -> bytes:  # type: ignore[type-arg]
    """The bytes one flush of ``events`` puts on the wire."""
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=60.0)
    for event in events:
        writer.post(event)
    flusher = threading.Thread(target=writer.flush)  # a message larger than the pipe: read while it is written
    flusher.start()
    message = reader.recv_bytes()
    flusher.join()
    assert not reader.poll(0)  # one flush, one message
    writer.close()
    reader.close()
    return message


def _logged(n: int, rank: int = 0) -> list[Metrics]:
    return [Metrics(rank, i, {"train/loss": 1.0 / (i + 1), "lr": 1e-3}, 100.0 + i) for i in range(n)]


def test_one_flush_of_many_log_calls_is_one_batch_event_on_the_wire() -> None:
    posted = _logged(1_000)
    events = channel.decode(_flush_message(posted))
    assert len(events) == 1 and type(events[0]) is MetricsBatch
    assert len(events[0]) == 1_000
    assert list(events[0].events()) == posted  # every value, step and time as posted


def test_what_the_kernel_unpickles_does_not_grow_with_the_number_of_log_calls() -> None:
    def opcodes(n: int) -> int:
        return sum(1 for _ in pickletools.genops(_flush_message(_logged(n))))

    assert opcodes(10_000) <= opcodes(10) + 10  # the arrays grow (longer byte strings, more frames), no objects


def test_posted_order_is_kept_and_a_send_comes_after_every_earlier_post() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=60.0)
    writer.post(Progress(0, 1, 10, "train", 0.0))
    for event in _logged(3):
        writer.post(event)
        writer.post(Progress(0, event.step + 2, 10, "train", 0.0))  # type: ignore[operator]
    writer.send(Finished(0, 7))
    writer.post(Metrics(0, 99, {"loss": 9.0}, 0.0))
    writer.post(Metrics(0, 100, {"loss": 10.0}, 0.0))
    writer.close()
    first, second = channel.decode(reader.recv_bytes()), channel.decode(reader.recv_bytes())
    assert [type(e).__name__ for e in first] == ["Progress", "MetricsBatch", "Progress", "Progress", "Progress",
                                                 "Finished"]
    assert [e.n for e in first if type(e) is Progress] == [1, 2, 3, 4]
    assert [e.step for e in first[1].events()] == [0, 1, 2]  # type: ignore[union-attr]
    assert [e.step for e in second[0].events()] == [99, 100]  # type: ignore[union-attr]
    reader.close()


def test_read_events_gives_the_posted_metrics_back() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=60.0)
    for event in _logged(5):
        writer.post(event)
    writer.close()
    assert channel.read_events(reader) == _logged(5)
    reader.close()


def test_every_shape_of_log_call_round_trips_exactly() -> None:
    posted = [
        Metrics(0, None, {"a": 1.0}, 1.0),
        Metrics(0, 3, {"a": 2.0, "b": float("nan")}, 2.0),
        Metrics(0, 3, {"b": float("inf"), "a": -1.0}, 3.0),  # another key order: another run
        Metrics(0, 4, {}, 4.0),
        Metrics(0, -5, {"c": 7.0}, 5.0),
        Metrics(0, None, {"a": 3.0}, 6.0),
    ]
    [batch] = pack(posted)
    assert isinstance(batch, MetricsBatch)
    got = list(batch.events())
    assert [(e.step, list(e.values), e.time) for e in got] == [(e.step, list(e.values), e.time) for e in posted]
    assert str(got) == str(posted)  # nan compares unequal to itself: compare the text
    assert batch.record(-1) == posted[-1] and batch.record(1).step == 3
    assert [batch.steps[i] for i in (0, 5)] == [NO_STEP, NO_STEP]
    with pytest.raises(IndexError, match="record 6 of a batch of 6"):
        batch.record(6)


def test_a_number_that_is_not_a_float_arrives_as_a_float() -> None:
    [batch] = pack([Metrics(0, 1, {"epoch": 3}, 0.0), Metrics(0, 2, {"epoch": 4}, 0.0)])
    assert [e.values for e in batch.events()] == [{"epoch": 3.0}, {"epoch": 4.0}]
    assert all(type(e.values["epoch"]) is float for e in batch.events())


def test_a_log_call_that_cannot_be_packed_travels_as_itself_in_its_place() -> None:
    odd = [Metrics(0, 2**70, {"a": 1.0}, 2.0), Metrics(0, 3, {"a": "text"}, 3.0), Metrics(0, True, {"a": 1.0}, 4.0)]
    posted = [Metrics(0, 1, {"a": 1.0}, 1.0), Metrics(0, 2, {"a": 2.0}, 1.5), odd[0], odd[1],
              Metrics(0, 5, {"a": 5.0}, 5.0), Metrics(0, 6, {"a": 6.0}, 6.0), odd[2], Metrics(0, 8, {"a": 8.0}, 8.0)]
    out = pack(posted)
    assert [type(e).__name__ for e in out] == ["MetricsBatch", "Metrics", "Metrics", "MetricsBatch", "Metrics",
                                               "Metrics"]
    flat = [m for e in out for m in (e.events() if isinstance(e, MetricsBatch) else [e])]
    assert flat == posted


def test_batches_are_per_rank_and_a_lone_log_call_is_not_wrapped() -> None:
    posted = [Metrics(1, 1, {"a": 1.0}, 0.0), Metrics(0, 1, {"a": 1.0}, 0.0), Metrics(1, 2, {"a": 2.0}, 0.0)]
    out = pack(posted)
    assert [type(e).__name__ for e in out] == ["MetricsBatch", "Metrics"]
    assert out[0].rank == 1 and [e.step for e in out[0].events()] == [1, 2]
    assert pack([posted[0]]) == [posted[0]]


def test_a_sink_without_handle_metrics_gets_the_metrics_events_and_a_batch_sink_the_batch() -> None:
    class Plain(BaseSink):  # was deliver(sink, batch): BaseSink.handle_metrics is now that fallback
        def __init__(self) -> None:
            self.events: list[object] = []

        def handle(self, event: object) -> None:
            self.events.append(event)

    class Batched(Plain):
        def handle_metrics(self, batch: MetricsBatch) -> None:
            self.events.append(batch)

    [batch] = pack(_logged(4))
    plain, batched = Plain(), Batched()
    plain.handle_metrics(batch)
    batched.handle_metrics(batch)
    assert plain.events == _logged(4) and batched.events == [batch]


def test_a_batch_is_picklable_by_value() -> None:
    [batch] = pack(_logged(3))
    again = pickle.loads(pickle.dumps(batch))
    assert list(again.events()) == _logged(3)
