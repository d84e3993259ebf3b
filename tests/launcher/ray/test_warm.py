"""Warm workers (issue 49 item 2): what a run leaves for the next launch of the same shape, and when it goes.

The two-node test (``test_two_nodes.py::test_a_second_launch_reuses_...``) runs launches on kept actors for real; here
the keeping itself, without a cluster."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from notebook_accel.cluster import RayCluster
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.ray import reserve, warm
from tests.launcher.ray.test_parts import _FakeRay, _handle
from notebook_accel.launcher.placement.ray.watch import RayWatch
from notebook_accel.launcher.placement.remote.watch import CLOSED_GRACE


class _Killer:
    """Records the actors and groups Ray is asked to free (``util.remove_placement_group``)."""

    def __init__(self, initialized: bool = True) -> None:
        self.killed: list[Any] = []
        self.removed: list[Any] = []
        self.initialized = initialized
        self.util = self

    def is_initialized(self) -> bool:
        return self.initialized

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed.append(actor)

    def remove_placement_group(self, group: Any) -> None:
        self.removed.append(group)


@pytest.fixture(autouse=True)
def _nothing_kept() -> Any:
    warm.release_ray_workers()
    yield
    warm.release_ray_workers()


def test_a_kept_run_is_taken_once_by_the_same_shape_only() -> None:
    cluster = RayCluster(resources_per_worker={"CPU": 1})
    ray = _Killer()
    kept = warm.WarmWorkers(ray, "group", ["a0", "a1"])
    warm.keep(warm.shape_of(cluster, 2), kept, 0.3)
    assert warm.take(warm.shape_of(cluster, 3)) is None  # another number of workers
    assert warm.take(warm.shape_of(RayCluster(resources_per_worker={"CPU": 2}), 2)) is None  # other resources
    assert warm.take(warm.shape_of(cluster, 2)) is kept
    time.sleep(0.6)  # past the idle time: taken, its timer stopped, so it is not released
    assert warm.take(warm.shape_of(cluster, 2)) is None and ray.killed == []


def test_kept_workers_go_after_the_idle_time_or_when_released() -> None:
    ray = _Killer()
    shape = warm.shape_of(RayCluster(), 2)
    warm.keep(shape, warm.WarmWorkers(ray, "g1", ["a0", "a1"]), 0.2)
    deadline = time.monotonic() + 10
    while ray.killed != ["a0", "a1"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.killed == ["a0", "a1"] and warm.take(shape) is None
    warm.keep(shape, warm.WarmWorkers(ray, "g2", ["b0"]), 60)
    warm.keep(shape, warm.WarmWorkers(ray, "g3", ["c0"]), 60)  # a newer run of the shape: the older one goes
    assert ray.killed[-1] == "b0"
    assert [w.group for w in warm.kept()] == ["g3"]
    assert warm.release_ray_workers() == 1 and ray.killed[-1] == "c0" and warm.kept() == []
    assert ray.removed == ["g1", "g2", "g3"]
    gone = _Killer(initialized=False)  # after ray.shutdown(): nothing is asked of Ray (it would start a new one)
    warm.keep(shape, warm.WarmWorkers(gone, "g4", ["d0"]), 60)
    assert warm.release_ray_workers() == 1 and gone.killed == [] and gone.removed == []


@pytest.mark.parametrize("value", [-1, float("nan"), True, "60", 86401])
def test_a_bad_keep_warm_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(LaunchError, match="keep_warm=.* is not allowed; give seconds from 0"):
        RayCluster(keep_warm=value)


def test_a_rank_process_killed_while_its_actor_lives_is_its_own_failure_with_its_node() -> None:
    """With warm actors a rank runs in a child of its actor: a kill of the child returns a negative code from the
    actor's run, not an actor death; before the kernel's stop it is the rank's own failure, after it the stop's."""
    for signalled in (False, True):
        ray = _FakeRay([])
        handle, theirs = _handle(1, "10.0.0.2", "ref1")
        if signalled:
            handle.send_signal(signal.SIGTERM)
        watch = RayWatch(ray, [handle], node_timeout=30)
        watch.start()
        try:
            ray.results["ref1"] = -int(signal.SIGTERM if signalled else signal.SIGKILL)
            assert handle.ended.wait(CLOSED_GRACE + 10)
        finally:
            watch.stop()
            theirs.close()
            handle.reap()
            if handle.control is not None:
                handle.control.close()
        if signalled:
            assert handle.exit_code == -int(signal.SIGTERM) and handle.death_reason is None
        else:
            assert handle.exit_code == -int(signal.SIGKILL)
            assert handle.death_reason == ("its process on node 10.0.0.2 was killed by SIGKILL before the function "
                                           "returned (by another process, or that node's out-of-memory killer)")


class _Group:
    """A placement group as Ray describes its bundles."""

    bundle_specs = [{"CPU": 1.0}, {"CPU": 1.0}]


def test_a_refusal_waits_for_the_warm_workers_it_released_or_says_they_held_the_cpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tutorial 09: a launch of another shape releases the kernel's warm workers, and Ray frees their CPUs a moment
    later, so the refusal that followed said "0 free CPUs" with nothing to say why."""
    ray = _FakeRay([{"Alive": True, "Resources": {"CPU": 2.0}}])  # 1 free CPU of 2, whatever happens
    warm.keep(warm.shape_of(RayCluster(), 2), warm.WarmWorkers(ray, _Group(), ["a0", "a1"]), 60)
    assert reserve.held_warm(ray) == {"CPU": 2.0}
    assert reserve.held_warm(_FakeRay([])) == {}  # workers kept on another cluster: not this one's
    monkeypatch.setattr(reserve, "SETTLE_SECONDS", 0.3)
    with pytest.raises(LaunchError) as caught:
        reserve.reserve(ray, RayCluster(), 3, freed={"CPU": 2.0})  # never shows as free: said after the wait
    assert ("1 node with 1 free CPU and 0 free GPUs (of 2 CPUs, 0 GPUs; 2 CPUs of them held until a moment ago by "
            "this kernel's warm workers from its last run, released for this launch)") in str(caught.value)
    with pytest.raises(LaunchError) as caught:
        reserve.reserve(ray, RayCluster(), 3, freed={"CPU": 1.0})  # free again: the cluster as it is
    assert "(of 2 CPUs, 0 GPUs); the run asks" in str(caught.value) and "warm" not in str(caught.value)
