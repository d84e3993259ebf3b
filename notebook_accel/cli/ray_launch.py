"""``notebook-accel launch --cluster ray SCRIPT``: run a script's ``__main__`` on a Ray cluster's workers.

The script's text travels with the launch (the nodes need not share a file system), and each rank runs it as
``__main__`` with the script's arguments in ``sys.argv``, through :func:`notebook_accel.notebook_launcher` with the
cluster: the same placement, output and errors as a notebook's run. Modules beside the script travel only when the
cluster's ``runtime_env`` ships them (``working_dir``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from notebook_accel.cluster import RayCluster
from notebook_accel.config import Config

__all__ = ["run_script", "launch_on_cluster", "cluster_from_flags"]


def run_script(path: str, source: str, argv: list[str]) -> None:
    """In a worker: run ``source`` (the script at ``path`` on the launching machine) as ``__main__``."""
    sys.argv = [path, *argv]
    code = compile(source, path, "exec")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})  # noqa: S102 - the user's


def cluster_from_flags(config: Config, kind: str | None, address: str | None, placement: str | None,
                       cpus: float | None, gpus: float | None) -> RayCluster | None:
    """The cluster of the config's ``cluster:`` section overridden by the flags (``None``: run on this machine)."""
    base = config.cluster
    if kind is None and base is None:
        return None
    fields: dict[str, Any] = {} if base is None else {
        "address": base.address, "resources_per_worker": dict(base.resources_per_worker), "placement": base.placement,
        "reserve_timeout": base.reserve_timeout, "node_timeout": base.node_timeout, "runtime_env": base.runtime_env,
        "keep_warm": 0.0}  # a script's launch is its process's only one: nothing to keep warm for
    if address is not None:
        fields["address"] = address
    if placement is not None:
        fields["placement"] = placement
    resources = dict(fields.get("resources_per_worker", {"CPU": 1.0}))
    if cpus is not None:
        resources["CPU"] = cpus
    if gpus is not None:
        resources["GPU"] = gpus
    fields["resources_per_worker"] = resources
    return RayCluster(**fields)


def launch_on_cluster(config: Config, cluster: RayCluster, script: str, script_args: list[str]) -> None:
    """Run ``script`` on ``config.num_processes`` workers of ``cluster`` (raises what the launcher raises)."""
    from notebook_accel.launcher import notebook_launcher

    with open(script, encoding="utf-8") as f:
        source = f.read()
    notebook_launcher(run_script, args=(os.path.abspath(script), source, script_args),
                      num_processes=config.num_processes, dashboard=False, cluster=cluster, config=config)
