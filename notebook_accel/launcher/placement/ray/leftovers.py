"""What this kernel's Ray runs left on the cluster: the check behind "nothing is left" that needs no ``ray[default]``.

``ray list actors`` and ``ray list placement-groups`` need Ray's dashboard (the ``ray[default]`` extra), which the
``ray`` extra does not install. :func:`ray_leftovers` asks the cluster's control store directly, through the kernel's
own connection, for the worker actors and the reservations of this kernel's runs that are still there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ray_leftovers", "GROUP_PREFIX", "group_name"]

GROUP_PREFIX = "notebook-accel"  # every run's placement group is named "notebook-accel:<job id>:<run>"
_WORKER_CLASS = "RankWorker"


def group_name(job_id: str, run: str) -> str:
    """The name of a run's placement group (its job, so :func:`ray_leftovers` finds only this kernel's)."""
    return f"{GROUP_PREFIX}:{job_id}:{run}"


def ray_leftovers() -> dict[str, list[str]]:
    """This kernel's worker actors still alive and its runs' reservations not released, on the cluster it joined.

    Returns:
        ``{"actors": [actor ids], "placement_groups": [group names]}``; both empty after every run ended, however it
        ended (a timeout, the stop button, a failure, a lost node).

    Raises:
        RuntimeError: this kernel has not joined a Ray cluster (no run on Ray happened here).

    Example:
        >>> from notebook_accel import ray_leftovers
        >>> ray_leftovers()  # doctest: +SKIP
        {'actors': [], 'placement_groups': []}
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("this kernel has not joined a Ray cluster, so no run of it can have left anything there; "
                           "call ray_leftovers() in the kernel that launched with cluster=")
    job = ray.get_runtime_context().get_job_id()
    actors = [str(a["ActorID"]) for a in _actor_table(ray).values()
              if a.get("JobID") == job and str(a.get("ActorClassName", "")).endswith(_WORKER_CLASS)
              and a.get("State") != "DEAD"]
    prefix = group_name(job, "")
    groups = [str(g.get("name")) for g in ray.util.placement_group_table().values()
              if str(g.get("name", "")).startswith(prefix) and g.get("state") != "REMOVED"]
    return {"actors": actors, "placement_groups": groups}


def _actor_table(ray: Any) -> dict[str, Any]:
    """Every actor the cluster's control store knows (Ray core's own table; the state API needs the dashboard)."""
    from ray._private import state

    return dict(state.actors())
