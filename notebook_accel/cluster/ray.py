"""The Ray request: :class:`RayCluster` (what ``cluster="ray"`` and ``cluster: {kind: ray}`` ask for).

``notebook_launcher(..., cluster="ray")`` (or ``cluster=RayCluster(...)``, or ``cluster:`` in the YAML config) runs
the workers as actors of a Ray cluster instead of forking them here. This module only describes the request and
checks it; it imports neither Ray nor torch (the config and the picker read it too). Its registry entry is
:data:`notebook_accel.cluster.ray_spec.RAY`; the placement itself is :mod:`notebook_accel.launcher.placement.ray`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from notebook_accel.errors import LaunchError, shown

__all__ = ["RayCluster", "Strategy", "BackChannelMode", "FIELDS", "STRATEGIES"]

Strategy = Literal["pack", "spread", "strict_pack", "strict_spread"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
BackChannelMode = Literal["auto", "direct", "relay"]
_MODES: tuple[str, ...] = get_args(BackChannelMode)
FIELDS = ("address", "resources_per_worker", "placement", "reserve_timeout", "node_timeout", "runtime_env",
          "keep_warm", "back_channel")


@dataclass(frozen=True)
class RayCluster:
    """A Ray cluster to run the workers on: one actor per rank, all reserved at once (a placement group).

    Args:
        address: the cluster: ``"auto"`` (the one this machine belongs to, or the one the kernel already joined with
            ``ray.init``), ``"ray://head:10001"`` (Ray Client), ``"host:6379"`` (the head's GCS), or ``"local"``
            (start a one-machine Ray in this kernel: for trying it out).
        resources_per_worker: what each worker reserves, e.g. ``{"GPU": 1, "CPU": 8}``; default ``{"CPU": 1}``,
            plus ``{"GPU": 1}`` when ``use_gpu`` is asked for by :func:`notebook_launcher` (GPUs are used when
            the resources name them).
        placement: ``"pack"`` (as few nodes as possible), ``"spread"`` (as many as possible), or their strict
            forms, which fail instead of bending.
        reserve_timeout: seconds to wait for the whole reservation before giving up with what the cluster has.
        node_timeout: seconds a worker may stay silent (no heartbeat: its node lost, its network cut, or the
            process frozen) before the run fails naming its node.
        runtime_env: Ray's ``runtime_env`` for the worker actors (``{"pip": [...]}``, ``{"env_vars": {...}}``,
            ``{"working_dir": "."}``); ``None``: the nodes' own environment.
        keep_warm: seconds the run's workers (their actors, torch imported, and their reservation) stay after a
            run, for the next launch of the same shape from this kernel to start at once; ``0``: released at the
            end of each run. They are released after that long without a launch, when the kernel ends, or with
            :func:`notebook_accel.release_ray_workers`; a stopped run's are released at once.
        back_channel: how the workers' output, events and control reach the kernel. ``"direct"``: each worker
            connects to the kernel (the notebook must be reachable from every node); ``"relay"``: through an actor
            on the cluster's head that the kernel reads with Ray calls (for a notebook off the cluster's network:
            Ray Client, NAT; the live view lags by a fraction of a second); ``"auto"`` (default): direct when every
            worker reaches the kernel within a second at the start of the run, else the relay.

    Example:
        >>> RayCluster(resources_per_worker={"GPU": 1, "CPU": 8}, placement="spread").uses_gpu
        True
    """

    address: str = "auto"
    resources_per_worker: Mapping[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    placement: Strategy = "pack"
    reserve_timeout: float = 120.0
    node_timeout: float = 15.0
    runtime_env: Mapping[str, Any] | None = None
    keep_warm: float = 300.0
    back_channel: BackChannelMode = "auto"

    def __post_init__(self) -> None:
        _check_text("address", self.address)
        _check_resources(self.resources_per_worker)
        if self.placement not in STRATEGIES:
            raise LaunchError(f"RayCluster(placement={shown(self.placement)}) is not allowed; use one of "
                              f"{list(STRATEGIES)}: 'pack' puts workers on as few nodes as possible")
        for name in ("reserve_timeout", "node_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 1.0 <= value <= 86400.0:
                raise LaunchError(f"RayCluster({name}={shown(value)}) is not allowed; give seconds from 1 to 86400")
        warm = self.keep_warm
        if isinstance(warm, bool) or not isinstance(warm, (int, float)) or not math.isfinite(warm) \
                or not 0.0 <= warm <= 86400.0:
            raise LaunchError(f"RayCluster(keep_warm={shown(warm)}) is not allowed; give seconds from 0 (release the "
                              "workers after each run) to 86400")
        if self.back_channel not in _MODES:
            raise LaunchError(f"RayCluster(back_channel={shown(self.back_channel)}) is not allowed; use one of "
                              f"{list(_MODES)}: 'auto' connects directly when the workers can reach the notebook, "
                              "else through the cluster")
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            raise LaunchError(f"RayCluster(runtime_env={shown(self.runtime_env)}) is not allowed; give a dict such "
                              "as {'env_vars': {'HF_HOME': '/data/hf'}} or None")

    @property
    def uses_gpu(self) -> bool:
        """Whether each worker reserves GPUs (then it trains on its GPU with nccl; else on CPU with gloo)."""
        return float(self.resources_per_worker.get("GPU", 0)) > 0

    def describe(self) -> str:
        """``Ray cluster auto, 2 x {'CPU': 1.0} (pack)``-style words for the header and errors."""
        return f"Ray cluster {self.address}, each worker {dict(self.resources_per_worker)} ({self.placement})"


def _check_text(name: str, value: object) -> None:
    """A non-empty string without spaces."""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise LaunchError(f"RayCluster({name}={shown(value)}) is not allowed; give 'auto', 'local', "
                          "'ray://head:10001' or 'head:6379'")


def _check_resources(resources: object) -> None:
    """A mapping of resource names to positive amounts, with at least some CPU or GPU."""
    if not isinstance(resources, Mapping) or not resources:
        raise LaunchError(f"RayCluster(resources_per_worker={shown(resources)}) is not allowed; give a dict such as "
                          "{'GPU': 1, 'CPU': 8}")
    for key, amount in resources.items():
        if not isinstance(key, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or not math.isfinite(amount) or amount < 0:
            raise LaunchError(f"RayCluster(resources_per_worker={shown(resources)}): {shown(key)}: {shown(amount)} is "
                              "not allowed; each amount is a number >= 0, e.g. {'GPU': 1, 'CPU': 8}")
    if float(resources.get("GPU", 0)) > 0 and float(resources["GPU"]) != 1:
        raise LaunchError(f"RayCluster(resources_per_worker={shown(resources)}): each worker drives one GPU here "
                          "(one process per device); use {'GPU': 1, ...} and more workers")
