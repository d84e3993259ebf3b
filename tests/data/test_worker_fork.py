"""DataLoader workers that deadlock at birth (CPython gh-112275) are killed and forked again, not waited on forever.

The deadlock is made for real: a fork hook (``os.register_at_fork``, which runs in the child before it reaches
the guarded launch's own code, as the interpreter's after-fork work does) blocks on a lock the parent held at the
fork, so the child sleeps on a futex, alone, using no CPU: the state the real bug leaves a worker in.
"""

from __future__ import annotations

import os
import sys
import types
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator
from notebook_accel.data import worker_fork
from notebook_accel.data.worker_fork import GuardedForkContext, WorkerStartError

_HELD = threading.Lock()
_ARMED: dict[str, Path | None] = {"marker": None, "always": None}


def _after_fork_in_child() -> None:
    """Deadlock the child the first time (or every time) while a test has armed it."""
    marker, always = _ARMED["marker"], _ARMED["always"]
    if marker is None:
        return
    if always is not None or not marker.exists():
        marker.touch()
        _HELD.acquire()  # held by the parent at the fork: waits forever


os.register_at_fork(after_in_child=_after_fork_in_child)


@pytest.fixture
def deadlocking_fork(tmp_path: Path) -> Iterator[dict[str, Path | None]]:
    """Arm the fork hook; the held lock is released and the hook disarmed afterwards."""
    _HELD.acquire()
    _ARMED["marker"] = tmp_path / "first-child"
    try:
        yield _ARMED
    finally:
        _ARMED["marker"] = _ARMED["always"] = None
        _HELD.release()


def _square(value: int) -> int:
    return value * value


def test_the_bug_is_known_where_it_lives() -> None:
    assert worker_fork.fork_child_can_deadlock((3, 11, 7))
    assert worker_fork.fork_child_can_deadlock((3, 10, 16))
    assert not worker_fork.fork_child_can_deadlock((3, 11, 8))
    assert not worker_fork.fork_child_can_deadlock((3, 12, 0))
    assert not worker_fork.fork_child_can_deadlock((3, 13, 1))


def test_the_guard_replaces_only_the_default_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_fork, "fork_child_can_deadlock", lambda: True)
    assert isinstance(worker_fork.worker_context(2, None), GuardedForkContext)
    assert isinstance(worker_fork.worker_context(2, "fork"), GuardedForkContext)
    assert worker_fork.worker_context(2, "spawn") == "spawn"
    own = torch.multiprocessing.get_context("fork")
    assert worker_fork.worker_context(2, own) is own  # a context object of the user's own is theirs
    assert worker_fork.worker_context(0, None) is None  # no workers, nothing forked
    monkeypatch.setattr(worker_fork, "fork_child_can_deadlock", lambda: False)
    assert worker_fork.worker_context(2, None) is None  # a fixed interpreter: the loader's own default


def test_a_worker_deadlocked_at_birth_is_forked_again_and_no_item_is_lost(
        deadlocking_fork: dict[str, Path | None], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_fork, "fork_child_can_deadlock", lambda: True)
    loader = Accelerator(cpu=True).prepare(DataLoader(list(range(20)), batch_size=4, num_workers=2, timeout=20))
    assert isinstance(loader.multiprocessing_context, GuardedForkContext)
    before = GuardedForkContext.restarts
    items = sorted(int(v) for batch in loader for v in batch)
    assert items == list(range(20))
    assert GuardedForkContext.restarts == before + 1
    marker = deadlocking_fork["marker"]
    assert marker is not None and marker.exists()  # the first child really was deadlocked


def test_a_worker_that_deadlocks_every_time_is_a_clear_error_and_leaves_no_process(
        deadlocking_fork: dict[str, Path | None], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    deadlocking_fork["always"] = tmp_path
    monkeypatch.setattr(worker_fork, "ATTEMPTS", 2)
    process = GuardedForkContext().Process(target=_square, args=(3,))
    with pytest.raises(WorkerStartError, match=r"deadlocked at birth 2 times.*gh-112275.*3\.11\.8"):
        process.start()
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    if children.exists():
        assert children.read_text().split() == []  # both tries killed and reaped


def test_a_healthy_worker_starts_once() -> None:
    before = GuardedForkContext.restarts
    process = GuardedForkContext().Process(target=_square, args=(3,))
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert GuardedForkContext.restarts == before


class _NotebookItems(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A dataset class as a notebook cell defines it (its module is ``__main__``)."""

    __module__ = "__main__"

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_workers_that_would_need_a_notebook_class_are_refused_at_prepare(
        method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # a kernel's: no file, no spec
    plain = DataLoader(_NotebookItems(), batch_size=2, num_workers=2, multiprocessing_context=method)
    with pytest.raises(WorkerStartError, match=rf"'{method}'.*'_NotebookItems'.*notebook.*\.py file"):
        Accelerator(cpu=True).prepare(plain)  # was: every worker died at birth, "exited unexpectedly"
    forked = DataLoader(_NotebookItems(), batch_size=2, num_workers=2, multiprocessing_context="fork", timeout=20)
    assert sum(len(batch) for batch in Accelerator(cpu=True).prepare(forked)) == 4  # fork shares the class


def test_spawned_workers_of_a_script_may_use_its_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    script = types.ModuleType("__main__")
    script.__file__ = __file__  # a script a fresh interpreter can run again
    monkeypatch.setitem(sys.modules, "__main__", script)
    plain = DataLoader(_NotebookItems(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    assert Accelerator(cpu=True).prepare(plain).num_workers == 2
