"""Warm workers: a Ray run's actors and their reservation kept after the run, for the next launch from this kernel.

A launch on Ray pays for a reservation, for starting one actor per rank and for each actor importing torch: seconds,
where a notebook's next launch should take about as long as a local one. With ``RayCluster(keep_warm=...)`` (default
300 s) a run that ended with every actor alive (it finished, or a rank failed and the others stopped by themselves)
puts its placement group and actors here; the next launch of the same shape (the cluster's address, the resources
of each worker, the placement, the runtime_env, the number of workers) takes them and only forks a fresh child in
each actor (:mod:`.actor`): nothing of the last run is in it. They are released after ``keep_warm`` seconds without
a launch, when the kernel ends, by :func:`release_ray_workers`, or at once when a run was stopped (its actors are
killed). :func:`~notebook_accel.launcher.placement.ray.leftovers.ray_leftovers` names what is kept here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from notebook_accel.cluster import RayCluster
from notebook_accel.launcher.placement.remote.keep import Kept

__all__ = ["WarmWorkers", "shape_of", "take", "keep", "release_ray_workers", "kept"]


@dataclass
class WarmWorkers:
    """One run's reservation and actors, kept for the next launch of the same shape.

    Attributes:
        ray: the ``ray`` module the kernel joined with; ``group``: the placement group; ``actors``: one per rank,
            in the order their bundles were reserved.
    """

    ray: Any
    group: Any
    actors: list[Any]

    def release(self) -> None:
        """Kill the actors and free the reservation (gone already is fine; after ``ray.shutdown()`` there is
        nothing to free, and a call would start a new local Ray)."""
        actors, self.actors = self.actors, []
        try:
            if not self.ray.is_initialized():
                return
            for actor in actors:
                self.ray.kill(actor, no_restart=True)
            self.ray.util.remove_placement_group(self.group)
        except Exception:  # noqa: BLE001 - the actors or the cluster are gone: nothing is held
            pass


# Released at the interpreter's exit too: Ray also ends a dead driver's actors; this frees them before it disconnects.
_KEPT: Kept[WarmWorkers] = Kept()


def shape_of(cluster: RayCluster, workers: int) -> tuple[Any, ...]:
    """What a launch must share with a kept run to use its workers."""
    return (cluster.address, tuple(sorted((k, float(v)) for k, v in cluster.resources_per_worker.items())),
            cluster.placement, repr(sorted((cluster.runtime_env or {}).items())), workers)


def take(shape: tuple[Any, ...]) -> WarmWorkers | None:
    """The kept workers of that shape, now the caller's (``None``: none kept)."""
    return _KEPT.take(shape)


def keep(shape: tuple[Any, ...], workers: WarmWorkers, seconds: float) -> None:
    """Keep ``workers`` for the next launch of ``shape`` for ``seconds`` (workers kept for it already go first)."""
    _KEPT.keep(shape, workers, seconds)


def release_ray_workers() -> int:
    """Release every Ray worker this kernel keeps warm (their actors and reservations) now; how many runs' worth.

    Example:
        >>> from notebook_accel import release_ray_workers
        >>> release_ray_workers()
        0
    """
    return _KEPT.release_all()


def kept() -> list[WarmWorkers]:
    """The workers kept warm now."""
    return _KEPT.kept()
