"""``notebook-accel launch --cluster NAME SCRIPT``: run a script's ``__main__`` on a cluster's workers.

The script's text travels with the launch (the nodes need not share a file system), and each rank runs it as
``__main__`` with the script's arguments in ``sys.argv``, through :func:`notebook_accel.notebook_launcher` with the
cluster: the same placement, output and errors as a notebook's run. Modules beside the script travel only when the
cluster ships them (Ray's ``runtime_env`` ``working_dir``) or the nodes share the folder. The flags that choose and
change the cluster are each placement's own (:func:`notebook_accel.cluster.registry.add_cluster_flags`).
"""

from __future__ import annotations

import os
import sys

from notebook_accel.cluster import Cluster
from notebook_accel.cluster.registry import cluster_from_flags
from notebook_accel.config import Config

__all__ = ["run_script", "launch_on_cluster", "cluster_from_flags"]


def run_script(path: str, source: str, argv: list[str]) -> None:
    """In a worker: run ``source`` (the script at ``path`` on the launching machine) as ``__main__``."""
    sys.argv = [path, *argv]
    code = compile(source, path, "exec")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})  # noqa: S102 - the user's


def launch_on_cluster(config: Config, cluster: Cluster, script: str, script_args: list[str]) -> None:
    """Run ``script`` on ``config.num_processes`` workers of ``cluster`` (raises what the launcher raises)."""
    from notebook_accel.launcher import notebook_launcher

    with open(script, encoding="utf-8") as f:
        source = f.read()
    notebook_launcher(run_script, args=(os.path.abspath(script), source, script_args),
                      num_processes=config.num_processes, dashboard=False, cluster=cluster, config=config)
