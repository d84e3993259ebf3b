"""Headless tests for notebook_accel.widgets.room: the kernel's memory of each function's size, and the first paint
the dashboard takes from it (an unseen function's empty output until its size is known)."""

from __future__ import annotations

from notebook_accel.events import Failed, Metrics, RunInfo, RunOutcome, Started
from notebook_accel.widgets import Dashboard
from notebook_accel.widgets.room import COMPACT_HEIGHT, GROW_AFTER, PENDING, RoomMemory, grows, live_height
from notebook_accel.widgets.snapshot import StaticResult
from tests.widgets.test_dashboard import Clock, Shown

INFO = RunInfo(2, ("cpu", "cpu"), "gloo", "train", function_key="__main__.train")


def _launch(memory: RoomMemory, info: RunInfo = INFO) -> tuple[Dashboard, Clock, Shown]:
    """A dashboard as a kernel makes it (the first frame after ``live_after``), started for ``info``."""
    clock, shown = Clock(), Shown()
    dash = Dashboard(clock=clock, display=shown, live_after=0.5, memory=memory)
    dash.start(info)
    return dash, clock, shown


def _html(obj: object) -> str:
    return obj._repr_html_()  # type: ignore[attr-defined,no-any-return]


def test_the_memory_keys_by_function_and_processes_and_a_compact_failure_leaves_it() -> None:
    memory = RoomMemory()
    assert memory.recall(INFO) is None
    memory.remember(INFO, "compact", "failed")  # a failure while compact says nothing of the function's length
    assert memory.recall(INFO) is None
    memory.remember(INFO, "compact", "finished")
    assert memory.recall(INFO) == "compact"
    memory.remember(INFO, "full", "interrupted")  # the view grew: full, however it ended
    assert memory.recall(INFO) == "full"
    assert memory.recall(RunInfo(4, ("cpu",) * 4, "gloo", "train", function_key="__main__.train")) is None
    assert memory.recall(RunInfo(2, ("cpu", "cpu"), "gloo", "train", function_key="lib.train")) is None
    assert memory.recall(RunInfo(2, ("cpu", "cpu"), "gloo", "train")) is None  # no key: its plain name
    memory.forget()
    assert memory.recall(INFO) is None


def test_grows_at_the_first_metric_or_after_grow_after() -> None:
    from notebook_accel.widgets.run_model import RunState

    state = RunState(INFO)
    assert not grows(state, GROW_AFTER - 0.1) and grows(state, GROW_AFTER)
    state.apply(Metrics(0, 0, {"loss": 1.0}, 0.0), 0.0)
    assert grows(state, 0.0)


def test_an_unseen_function_paints_nothing_and_a_short_run_then_its_compact_result() -> None:
    memory = RoomMemory()
    dash, clock, shown = _launch(memory)
    (frame,) = shown
    assert _html(frame) == PENDING and "display:none" in PENDING and repr(frame) == ""  # an empty output
    dash.phase("starting 2 worker processes")
    dash.handle(Started(0, 1, "cpu"))
    for _ in range(5):
        clock.now += 0.3
        dash.tick(clock.now)  # 1.5 s: not known to be long, nothing painted, not even a clock
    assert dash.view is None and shown.updates == []
    dash.finish(RunOutcome("finished", 1.5))
    (result,) = shown.updates  # the first paint is the result, in the compact line's room
    assert isinstance(result, StaticResult) and 'class="nacc-compact-result"' in _html(result)
    assert "<details " in _html(result) and "<details open" not in _html(result)
    assert memory.recall(INFO) == "compact"


def test_an_unseen_function_that_runs_long_paints_the_full_room_once_and_is_remembered_full() -> None:
    memory = RoomMemory()
    dash, clock, shown = _launch(memory)
    dash.phase("reserving 2 workers on the Ray cluster")
    clock.now += GROW_AFTER - 0.1
    dash.tick(clock.now)
    assert shown.updates == []
    clock.now += 0.1
    dash.tick(clock.now)  # GROW_AFTER: the full room, the status saying what the launch does
    assert dash.view is not None and shown.updates == [dash.view.root]
    assert "reserving 2 workers on the Ray cluster" in dash.view.top.value  # type: ignore[union-attr]
    dash.finish(RunOutcome("finished", 3.0))
    assert f"min-height:{live_height(2, True)}px" in _html(shown.updates[-1])  # the result keeps the room
    assert len(shown.updates) == 2 and memory.recall(INFO) == "full"


def test_an_unseen_functions_first_metric_paints_the_full_room_with_its_first_point() -> None:
    dash, clock, shown = _launch(RoomMemory())
    clock.now += 0.6
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    assert dash.view is not None and shown.updates == [dash.view.root]
    assert "<circle" in dash.parts["curves"]  # the first curve point is in the first paint


def test_a_background_runs_stop_button_comes_by_grow_after() -> None:
    stopped: list[bool] = []
    dash, clock, shown = _launch(RoomMemory())
    dash.attach_stop(lambda: stopped.append(True))
    clock.now += GROW_AFTER
    dash.tick(clock.now)
    assert dash.view is not None and dash.view.stop_button is not None
    dash.view.stop_button.click()
    assert stopped == [True]


def test_a_failure_or_an_interrupt_during_the_deferral_shows_at_once_and_leaves_the_memory() -> None:
    memory = RoomMemory()
    dash, clock, shown = _launch(memory)
    dash.handle(Started(0, 1, "cpu"))
    dash.handle(Failed(1, "ValueError", "bad", "..."))
    clock.now += 0.4
    dash.finish(RunOutcome("failed", 0.4, "rank 1 failed: ValueError: bad", (1,)))
    (result,) = shown.updates
    assert 'class="nacc-compact-result"' in _html(result) and "rank 1 failed: ValueError: bad" in _html(result)
    assert memory.recall(INFO) is None
    dash, clock, shown = _launch(memory)
    clock.now += 0.7
    dash.finish(RunOutcome("interrupted", 0.7, "interrupted by the user"))
    assert repr(shown.updates[-1]).startswith("train: stopped in 0.7s") and memory.recall(INFO) is None


def test_a_remembered_compact_function_shows_its_line_at_once_and_grows_once_when_it_runs_long() -> None:
    memory = RoomMemory()
    memory.remember(INFO, "compact", "finished")
    dash, clock, shown = _launch(memory)
    (frame,) = shown
    assert dash.view is None and 'class="nacc-dashboard nacc-compact"' in _html(frame)
    assert f"height:{COMPACT_HEIGHT}px" in _html(frame) and "starting" in repr(frame)
    dash.phase("starting 2 worker processes")
    assert shown.updates == []  # a short step costs no message
    clock.now += 0.3
    dash.tick(clock.now)  # its clock moves in the compact line
    assert dash.view is None and "0.3s" in _html(shown.updates[-1])
    clock.now += 0.1
    dash.tick(clock.now)  # within the refresh interval: no message
    assert len(shown.updates) == 1
    clock.now += 0.2
    dash.tick(clock.now)
    assert "starting 2 worker processes" in _html(shown.updates[-1])
    clock.now += GROW_AFTER
    dash.tick(clock.now)
    assert dash.view is not None and shown.updates[-1] is dash.view.root  # the one grow
    dash.finish(RunOutcome("finished", 3.0))
    assert memory.recall(INFO) == "full"


def test_a_remembered_full_function_paints_its_widgets_at_once_and_a_fast_end_keeps_the_room() -> None:
    memory = RoomMemory()
    memory.remember(INFO, "full", "finished")
    dash, clock, shown = _launch(memory)
    assert dash.view is not None and list(shown) == [dash.view.root]
    clock.now += 0.2
    dash.finish(RunOutcome("finished", 0.2))
    (result,) = shown.updates
    assert f"min-height:{live_height(2, True)}px" in _html(result) and "nacc-compact-result" not in _html(result)
    assert memory.recall(INFO) == "full"


def test_widgets_at_once_leave_the_memory_alone() -> None:
    memory = RoomMemory()
    clock, shown = Clock(), Shown()
    dash = Dashboard(clock=clock, display=shown, live_after=0.0, memory=memory)
    dash.start(INFO)
    dash.finish(RunOutcome("finished", 0.1))
    assert memory.recall(INFO) is None
