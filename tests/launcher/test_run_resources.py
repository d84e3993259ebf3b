"""The one owner of a run's resources: opened in order, closed in reverse once, whatever happens."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.launcher import accelerate_args, run_resources
from notebook_accel.launcher.kernel import fds as kernel_fds
from notebook_accel.launcher.plan import Plan
from notebook_accel.launcher.run_resources import RunResources, open_resources


def _plan(**changes: Any) -> Plan:
    """A one-machine, two-worker CPU plan (nothing is started by opening its resources)."""
    plan = Plan(
        function=print, args=(), devices=["cpu", "cpu"], backend="gloo", precision=None, steps=None, node=0, nodes=1,
        master_addr="127.0.0.1", port=None, limit=None, in_process=False, dashboard=False, show_all_ranks=False,
        prefix=None, rdzv=accelerate_args.check_rendezvous("static", "", None, "none", 0.1), block=True, engine=None)
    return replace(plan, **changes)


def test_closed_in_reverse_order_once() -> None:
    closed: list[str] = []
    with RunResources() as resources:
        for name in ("listener", "store", "guard"):
            assert resources.enter(name, closed.append) == name
    assert closed == ["guard", "store", "listener"]
    resources.close()  # again: nothing
    assert closed == ["guard", "store", "listener"]


def test_a_failing_close_does_not_skip_the_others_and_is_raised() -> None:
    closed: list[str] = []

    def broken(name: str) -> None:
        raise OSError(f"cannot close {name}")

    resources = RunResources()
    resources.enter("first", closed.append)
    resources.enter("second", broken)
    resources.enter("third", closed.append)
    with pytest.raises(OSError, match="cannot close second"):
        resources.close()
    assert closed == ["third", "first"]


def test_handed_over_resources_are_closed_by_the_new_owner_only() -> None:
    closed: list[str] = []
    with RunResources() as resources:
        resources.enter("store", closed.append)
        resources.hand_over()
    assert closed == []
    thread = threading.Thread(target=resources.close)
    thread.start()
    thread.join()
    assert closed == ["store"]


def test_a_failure_while_opening_closes_what_was_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    class Store(run_resources.StoreServer):
        """The real store, noting when it is closed."""

        def close(self) -> None:
            super().close()
            opened.append("store closed")

    def no_folder() -> str:
        raise OSError("no space left for the store folder")

    monkeypatch.setattr(run_resources, "StoreServer", Store)
    monkeypatch.setattr(run_resources, "new_store_folder", no_folder)
    registered = len(kernel_fds._RUNS)
    with pytest.raises(OSError, match="no space left"):
        open_resources(_plan(), 0, None)
    assert opened == ["store closed"]
    assert len(kernel_fds._RUNS) == registered  # never registered


def test_opened_in_order_and_all_closed(tmp_path: Path) -> None:
    resources = open_resources(_plan(), 0, None)
    store, private, descriptors = resources.store, resources.private, resources.descriptors
    assert store is not None and private is not None and descriptors is not None
    assert resources.watch is None and [env.rank for env in resources.envs] == [0, 1]
    assert resources.envs[0].master_port == resources.port == store.port
    assert resources.guard is None  # started once the workers exist: no worker inherits its pipe
    assert resources.inherited_fds() == (store.fd,)
    assert descriptors in kernel_fds._RUNS and os.path.isdir(private)
    assert descriptors.ports == set()  # one machine: the store serves no connection, no worker looks for sockets
    board = resources.open_board([0, 1])
    with resources:
        resources.guard_workers([])
        guard = resources.guard
        assert guard is not None and guard.fd in kernel_fds.snapshot().fds  # later runs' workers close it
    assert store.fd == -1 and guard.fd == -1 and not os.path.exists(private) and descriptors not in kernel_fds._RUNS
    with pytest.raises(ValueError):  # unmapped
        board.fresh(every=0.0)


def test_in_process_holds_no_store_nor_guard() -> None:
    with open_resources(_plan(devices=["cpu"], in_process=True), 0, None) as resources:
        assert resources.store is None and resources.guard is None and resources.private is None
        assert resources.inherited_fds() == ()
