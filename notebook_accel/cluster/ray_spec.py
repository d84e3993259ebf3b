"""The Ray placement's registry entry (:data:`RAY`): how the launcher, the config, the picker and the CLI see it.

Torch-free and Ray-free: the placement (:mod:`notebook_accel.launcher.placement.ray`) and the picker's controls
(:mod:`notebook_accel.widgets.ray_section`) are named by path and imported only when used.
"""

from __future__ import annotations

import argparse
from typing import Any

from notebook_accel.cluster.ray import FIELDS, STRATEGIES, RayCluster
from notebook_accel.cluster.registry import PlacementSpec, one_device_each

__all__ = ["RAY"]


def _devices(cluster: RayCluster, num_processes: int, use_cpu: bool | None) -> tuple[list[str], str]:
    """Its reserved GPU (Ray's ``CUDA_VISIBLE_DEVICES`` shows it as ``cuda:0``) with nccl, else the CPU with gloo."""
    return one_device_each(cluster, num_processes, use_cpu,
                           "drop use_cpu, or reserve no GPU (resources_per_worker={'CPU': ...})")


def _label(cluster: RayCluster) -> str:
    return "Ray cluster" if cluster.address == "auto" else f"Ray cluster {cluster.address}"


def _add_flags(parser: argparse.ArgumentParser) -> None:
    """``--ray_address``, ``--placement``, ``--cpus_per_worker``, ``--gpus_per_worker``."""
    parser.add_argument("--ray_address", "--ray-address", dest="ray_address", metavar="ADDR", default=None,
                        help="the Ray cluster: auto, local, ray://head:10001, head:6379")
    parser.add_argument("--placement", choices=list(STRATEGIES), default=None)
    parser.add_argument("--cpus_per_worker", "--cpus-per-worker", dest="cpus_per_worker", type=float, metavar="N",
                        default=None)
    parser.add_argument("--gpus_per_worker", "--gpus-per-worker", dest="gpus_per_worker", type=float, metavar="N",
                        default=None)


def _from_flags(base: RayCluster | None, args: argparse.Namespace) -> RayCluster:
    """The config's Ray request (or the defaults) overridden by the flags; nothing kept warm (a script's launch is
    its process's only one)."""
    fields: dict[str, Any] = {} if base is None else {name: getattr(base, name) for name in FIELDS}
    fields["keep_warm"] = 0.0
    if getattr(args, "ray_address", None) is not None:
        fields["address"] = args.ray_address
    if getattr(args, "placement", None) is not None:
        fields["placement"] = args.placement
    resources = dict(fields.get("resources_per_worker", {"CPU": 1.0}))
    if getattr(args, "cpus_per_worker", None) is not None:
        resources["CPU"] = args.cpus_per_worker
    if getattr(args, "gpus_per_worker", None) is not None:
        resources["GPU"] = args.gpus_per_worker
    fields["resources_per_worker"] = resources
    return RayCluster(**fields)


RAY = PlacementSpec(
    name="ray", title="Ray cluster", cluster_class=RayCluster, fields=FIELDS,
    placement_path="notebook_accel.launcher.placement.ray.placement:RayPlacement",
    picker_path="notebook_accel.widgets.ray_section:RaySection",
    starting=" on the Ray cluster (reserving, then starting)",
    devices=_devices, label=_label, add_flags=_add_flags, from_flags=_from_flags,
)
