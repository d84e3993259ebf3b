"""Where a run's workers are placed when they do not all run on this machine.

``notebook_launcher(..., cluster="ray")`` (or ``cluster=RayCluster(...)``, or ``cluster:`` in the YAML config) runs
the workers elsewhere instead of forking them here. Each placement is one torch-free spec in :mod:`.registry`
(:mod:`.ray_spec` for Ray) and a request class (:class:`RayCluster`, :mod:`.ray`); the placements themselves live
under :mod:`notebook_accel.launcher.placement`. Nothing here imports torch or a cluster's client library (the
config and the picker read it too).
"""

from __future__ import annotations

from notebook_accel.cluster.ray import RayCluster, Strategy
from notebook_accel.cluster.registry import (
    Cluster,
    PlacementSpec,
    check_cluster,
    cluster_devices,
    cluster_label,
    spec_named,
    spec_of,
    specs,
)

__all__ = ["RayCluster", "Strategy", "Cluster", "PlacementSpec", "check_cluster", "cluster_devices", "cluster_label",
           "spec_named", "spec_of", "specs"]
