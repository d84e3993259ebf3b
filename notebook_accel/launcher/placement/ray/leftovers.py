"""What this kernel's Ray runs left on the cluster: the check behind "nothing is left" that needs no ``ray[default]``.

``ray list actors`` and ``ray list placement-groups`` need Ray's dashboard (the ``ray[default]`` extra), which the
``ray`` extra does not install. :func:`ray_leftovers` asks the cluster's control store directly, through the kernel's
own connection, for the worker actors and the reservations of this kernel's runs that are still there.
"""

from __future__ import annotations

from typing import Any

from notebook_accel.launcher.placement.ray import warm

__all__ = ["ray_leftovers", "GROUP_PREFIX", "group_name"]

GROUP_PREFIX = "notebook-accel"  # every run's placement group is named "notebook-accel:<job id>:<run>"
_OUR_CLASSES = ("RankWorker", "RunRelay")  # a rank's actor, a relayed run's relay


def group_name(job_id: str, run: str) -> str:
    """The name of a run's placement group (its job, so :func:`ray_leftovers` finds only this kernel's)."""
    return f"{GROUP_PREFIX}:{job_id}:{run}"


def ray_leftovers() -> dict[str, list[str]]:
    """This kernel's worker actors still alive and its runs' reservations not released, on the cluster it joined.

    Returns:
        ``{"actors": [actor ids], "placement_groups": [group names], "kept_warm": [group names]}``: the first two
        are empty after every run ended, however it ended (a timeout, the stop button, a failure, a lost node);
        ``kept_warm`` names the reservations kept for the next launch (``RayCluster(keep_warm=...)``), whose actors
        are not listed; :func:`notebook_accel.release_ray_workers` frees them now.

    Raises:
        RuntimeError: this kernel has not joined a Ray cluster (no run on Ray happened here).

    Example:
        >>> from notebook_accel import ray_leftovers
        >>> ray_leftovers()  # doctest: +SKIP
        {'actors': [], 'placement_groups': [], 'kept_warm': []}
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("this kernel has not joined a Ray cluster, so no run of it can have left anything there; "
                           "call ray_leftovers() in the kernel that launched with cluster=")
    job = ray.get_runtime_context().get_job_id()
    kept_actors, kept_groups = _kept_warm()
    actors = [str(a["ActorID"]) for a in _actor_table(ray).values()
              if a.get("JobID") == job and str(a.get("ActorClassName", "")).endswith(_OUR_CLASSES)
              and a.get("State") != "DEAD" and str(a["ActorID"]) not in kept_actors]
    prefix = group_name(job, "")
    groups: list[str] = []
    kept: list[str] = []
    for group_id, g in ray.util.placement_group_table().items():
        if str(g.get("name", "")).startswith(prefix) and g.get("state") != "REMOVED":
            (kept if str(group_id) in kept_groups else groups).append(str(g.get("name")))
    return {"actors": actors, "placement_groups": groups, "kept_warm": kept}


def _kept_warm() -> tuple[set[str], set[str]]:
    """The ids of the actors and placement groups this kernel keeps warm on purpose (:mod:`.warm`)."""
    actors: set[str] = set()
    groups: set[str] = set()
    for workers in warm.kept():
        groups.add(workers.group.id.hex())
        actors.update(actor._actor_id.hex() for actor in workers.actors)
    return actors, groups


def _actor_table(ray: Any) -> dict[str, Any]:
    """Every actor the cluster's control store knows (Ray core's own table; the state API needs the dashboard).
    A Ray Client kernel has no such table of its own: a task on the cluster reads it there."""
    from notebook_accel.launcher.placement.ray.client import is_client

    if is_client(ray):
        return dict(ray.get(ray.remote(num_cpus=0)(_cluster_actor_table).remote(), timeout=60))
    return _cluster_actor_table()


def _cluster_actor_table() -> dict[str, Any]:
    """The control store's actor table, read where Ray runs as a member of the cluster."""
    from ray._private import state

    fields = ("ActorID", "JobID", "ActorClassName", "State")  # plain text: the rest holds protobuf objects
    return {str(k): {f: str(v.get(f, "")) for f in fields} for k, v in state.actors().items()}
