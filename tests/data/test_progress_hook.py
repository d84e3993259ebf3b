"""The prepared loader reports through the hook the worker's channel installs, with the values it always sent."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from notebook_accel import channel, progress_hook
from notebook_accel.events import Progress
from tests.data.test_loader import _prepare


class _Writer:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def post(self, event: Any) -> None:
        self.events.append(event)


def test_the_loader_calls_the_installed_hook_with_each_position() -> None:
    calls: list[tuple[Any, ...]] = []
    progress_hook.set_hook(lambda *fields: calls.append(fields))
    try:
        for _ in _prepare(DataLoader(range(6), batch_size=2), rank=1, n=2):
            pass
    finally:
        progress_hook.set_hook(None)
    assert calls == [(1, 1, 2, "train", 1, "loader"), (1, 2, 2, "train", 1, "loader")]


def test_without_a_hook_the_loader_reports_nothing() -> None:
    assert progress_hook.current() is None
    assert [b.tolist() for b in _prepare(DataLoader(range(4), batch_size=2))] == [[0, 1], [2, 3]]


def test_the_channel_sets_the_hook_to_post_the_same_progress_events() -> None:
    writer = _Writer()
    channel.install(writer)  # type: ignore[arg-type]
    try:
        assert progress_hook.current() is not None
        for _ in _prepare(DataLoader(range(4), batch_size=2)):
            pass
    finally:
        channel.uninstall()
    assert progress_hook.current() is None
    assert [(e.rank, e.n, e.total, e.desc, e.epoch, e.source) for e in writer.events] == [
        (0, 1, 2, "train", 1, "loader"), (0, 2, 2, "train", 1, "loader")]
    assert all(type(e) is Progress and e.time > 0 for e in writer.events)
