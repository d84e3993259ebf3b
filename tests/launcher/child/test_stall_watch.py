"""The worker's stall watch: where a thread waits, reported once when it stalls and once when it moves on, never for
a thread that works or reports progress, and no thread left behind."""

from __future__ import annotations

import linecache
import multiprocessing as mp
import threading
import time

import pytest

from notebook_accel import channel
from notebook_accel.events import Finished, Stalled
from notebook_accel.launcher.child.blocked_in import call_on
from notebook_accel.launcher.child.main import run_and_report
from notebook_accel.launcher.child.stall_watch import StallWatch

FAST = {"interval": 0.05, "after": 0.3}


def _watched(body: object, activity: object = lambda: 0) -> list[Stalled]:
    """The reports of a watch over this thread while ``body()`` runs."""
    sent: list[Stalled] = []
    watch = StallWatch(0, sent.append, activity, **FAST).start()  # type: ignore[arg-type]
    try:
        body()  # type: ignore[operator]
    finally:
        watch.stop()
    return sent


def test_a_thread_asleep_is_reported_once_with_its_line_then_taken_back() -> None:
    sent = _watched(lambda: time.sleep(2.0))  # the line
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# the line"))
    assert [(e.collective, e.call, e.line, e.stuck) for e in sent] == [("", "time.sleep", line, True),
                                                                       ("", "time.sleep", line, False)]
    assert sent[0].file == __file__


def test_a_thread_computing_in_one_place_is_not_reported() -> None:
    import torch

    from tests.monitor.hang_workers import one_long_torch_call

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        assert _watched(lambda: one_long_torch_call(4.0)) == []  # one call, the GIL released, for over a second
        assert time.perf_counter() - start > 1.0
    finally:
        torch.set_num_threads(threads)


def test_a_thread_that_reports_progress_is_not_reported() -> None:
    posted = [0]

    def step_loop() -> None:
        for _ in range(10):
            time.sleep(0.1)  # the same line every time, and most of the time
            posted[0] += 1  # as the event writer's count moves with each flush of posted steps

    assert _watched(step_loop, lambda: posted[0]) == []
    assert any(e.stuck for e in _watched(step_loop))  # the same loop, silent: it would be


@pytest.mark.parametrize(("text", "call"), [
    ("accelerator.reduce(loss)", "accelerator.reduce"),
    ("for batch in loader:", "for batch in loader:"),
    ("with accelerator.main_process_first():", "accelerator.main_process_first"),
    ("x = model(inputs).sum()", "model(inputs).sum"),
    ("(", "("),
])
def test_the_call_on_a_line(text: str, call: str) -> None:
    linecache.cache["<stall-test>"] = (len(text), None, [text + "\n"], "<stall-test>")
    try:
        assert call_on("<stall-test>", 1) == call
    finally:
        del linecache.cache["<stall-test>"]


@pytest.mark.timeout(60)
def test_the_worker_reports_a_stall_before_its_result_and_leaves_no_thread() -> None:
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn)
    before = {t.name for t in threading.enumerate()}
    try:
        assert run_and_report(writer, 0, time.sleep, (3.0,)) == 0
    finally:
        writer.close()
    events = []
    with pytest.raises(EOFError):  # every message, then the closed pipe
        while True:
            events += channel.read_events(reader)
    reader.close()
    assert [type(e).__name__ for e in events] == ["Stalled", "Stalled", "Finished"], events
    assert events[0].stuck and not events[1].stuck and isinstance(events[2], Finished)  # type: ignore[union-attr]
    assert {t.name for t in threading.enumerate()} - before == set()


class _Batch:
    """Something a training frame holds (weak-referenceable)."""


def test_a_look_keeps_no_frame_and_so_none_of_its_locals_alive() -> None:
    """A frame the watch looked at must not outlive its function: its locals (a batch, activations) would stay in
    memory until the next look."""
    import weakref

    inside, go = threading.Event(), threading.Event()
    box: list[object] = []

    def step() -> None:
        batch = _Batch()
        box.append(weakref.ref(batch))
        inside.set()
        go.wait(10.0)

    def body() -> None:
        box.append(StallWatch(0, lambda event: None, lambda: 0, **FAST))  # watches this thread; never started
        step()

    thread = threading.Thread(target=body)
    thread.start()
    assert inside.wait(10.0)
    watch, batch = box[0], box[1]
    watch._look(time.monotonic(), 0.0)  # type: ignore[attr-defined]  # one look while step() waits
    go.set()
    thread.join(10.0)
    assert batch() is None  # type: ignore[operator]
