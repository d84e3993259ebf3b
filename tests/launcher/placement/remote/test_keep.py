"""The kept-things registry both remote placements keep their warm workers in (:mod:`...remote.keep`): taken once
by the same shape only, ended by its idle time, by a newer run of its shape, by ``release_all`` and at exit. No
cluster: the kept things are stand-ins that record their release."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from notebook_accel.launcher.placement.remote import keep as keep_module
from notebook_accel.launcher.placement.remote.keep import Kept

HANG_GUARD = 30.0  # seconds: only a hang guard, never a timing claim


class _Thing:
    """A kept stand-in that records its releases (and, optionally, looks at the registry while releasing)."""

    def __init__(self, name: str, released: list[str], registry: Kept[_Thing] | None = None) -> None:
        self.name = name
        self.released = released
        self.registry = registry

    def release(self) -> None:
        if self.registry is not None:
            self.registry.kept()  # would deadlock if the registry released while holding its lock
        self.released.append(self.name)


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert time.monotonic() < deadline, "hang guard: the idle timer never fired"
        time.sleep(0.02)


def test_a_kept_thing_is_taken_once_and_by_its_own_shape_only() -> None:
    released: list[str] = []
    kept: Kept[_Thing] = Kept()
    thing = _Thing("a", released)
    kept.keep(("cluster", 2), thing, 60)
    assert kept.take(("cluster", 3)) is None and kept.kept() == [thing]
    assert kept.take(("cluster", 2)) is thing
    assert kept.take(("cluster", 2)) is None and kept.kept() == [] and released == []


def test_the_idle_time_ends_a_kept_thing_and_taking_it_stops_its_timer() -> None:
    released: list[str] = []
    kept: Kept[_Thing] = Kept()
    kept.keep("s", _Thing("idle", released), 0.1)
    _wait_for(lambda: released == ["idle"])
    assert kept.kept() == [] and kept.take("s") is None
    taken = _Thing("taken", released)
    kept.keep("s", taken, 0.2)
    assert kept.take("s") is taken
    time.sleep(0.5)  # past its idle time: taken, so its timer no longer ends it
    assert released == ["idle"]


def test_a_newer_thing_of_a_shape_ends_the_older_one_and_release_all_ends_the_rest() -> None:
    released: list[str] = []
    kept: Kept[_Thing] = Kept()
    kept.keep("s", _Thing("old", released), 0.2)
    kept.keep("s", _Thing("new", released), 60)
    kept.keep("t", _Thing("other", released, registry=kept), 60)
    assert released == ["old"] and [t.name for t in kept.kept()] == ["new", "other"]
    time.sleep(0.4)  # the older one's timer was stopped with it: nothing is released twice, "new" stays
    assert released == ["old"]
    assert kept.release_all() == 2 and sorted(released) == ["new", "old", "other"]
    assert kept.kept() == [] and kept.release_all() == 0


def test_the_idle_release_runs_outside_the_lock() -> None:
    released: list[str] = []
    kept: Kept[_Thing] = Kept()
    kept.keep("s", _Thing("looks", released, registry=kept), 0.05)
    _wait_for(lambda: released == ["looks"])  # its release() called kept.kept(): it would hang under the lock


def test_every_registry_is_released_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Any] = []
    monkeypatch.setattr(keep_module.atexit, "register", registered.append)
    kept: Kept[_Thing] = Kept()
    assert registered == [kept.release_all]


def test_keeping_from_several_threads_keeps_one_per_shape() -> None:
    released: list[str] = []
    kept: Kept[_Thing] = Kept()
    threads = [threading.Thread(target=kept.keep, args=("s", _Thing(str(i), released), 60)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
    assert len(kept.kept()) == 1 and len(released) == 7
    assert kept.release_all() == 1 and len(released) == 8
