"""Connecting to a Ray cluster and reserving a run's workers all at once (a placement group), within a bound.

A run that cannot fit the cluster at all fails at once, saying what the cluster has; one that fits but finds the
resources busy waits up to ``reserve_timeout`` and then fails the same way. Nothing stays reserved after a failure.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from notebook_accel.cluster import RayCluster
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.placement.ray.client import client_head, is_client
from notebook_accel.launcher.placement.ray.leftovers import group_name
from notebook_accel.launcher.placement.ray.warm import kept
from notebook_accel.launcher.placement.remote.interface import address_toward

__all__ = ["require_ray", "connect", "kernel_address", "held_warm", "inventory", "reserve", "release_group"]

SETTLE_SECONDS = 3.0  # the most a refusal waits for the warm workers this launch released to show as free
_STRATEGY = {"pack": "PACK", "spread": "SPREAD", "strict_pack": "STRICT_PACK", "strict_spread": "STRICT_SPREAD"}


def require_ray() -> Any:
    """The ``ray`` module, or a :class:`LaunchError` that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise LaunchError("cluster='ray' needs Ray in this kernel and on every node: pip install "
                          "'notebook-accel[ray]' (Ray core), then restart the kernel") from e
    return ray


def connect(ray: Any, cluster: RayCluster) -> None:
    """Join the cluster ``cluster.address`` names, unless this kernel already joined one with ``ray.init``.

    Raises:
        LaunchError: no cluster answers at that address, with how to start one.
    """
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if cluster.runtime_env is not None:
        options["runtime_env"] = dict(cluster.runtime_env)
    try:
        if cluster.address == "local":
            ray.init(include_dashboard=False, **options)
        else:
            ray.init(address=cluster.address, **options)
    except (ConnectionError, RuntimeError, ValueError) as e:
        if _token_refused(cluster.address):
            raise LaunchError(
                f"the Ray cluster at address={cluster.address!r} refused this kernel's authentication token (it has "
                "token authentication on, which Ray 2.60 starts clusters with unless RAY_AUTH_MODE=disabled): set "
                "the cluster's token in the notebook before its first launch, e.g. os.environ['RAY_AUTH_MODE'] = "
                "'token' and os.environ['RAY_AUTH_TOKEN'] = <the output of `ray get-auth-token` on the head> (or "
                "RAY_AUTH_TOKEN_PATH, a file holding it), then restart the kernel if it tried to connect already"
            ) from e
        raise LaunchError(
            f"no Ray cluster answers at address={cluster.address!r} ({type(e).__name__}: {e}). Start one with "
            "`ray start --head` on the head machine and `ray start --address=<head>:6379` on the others, or connect "
            "first with ray.init(...) in the notebook; to try it on this machine alone, use "
            "RayCluster(address='local')") from e


def _token_refused(address: str) -> bool:
    """Whether the cluster's head at ``address`` (``host:port``) refuses this kernel's token (or its lack of one).

    Ray's own failure says only that it could not connect; one call to the head's control service, with the token
    Ray would send, tells an authentication refusal from a head that is not there (``False`` when unsure).
    """
    if not address or address in ("auto", "local") or "://" in address:
        return False
    try:
        import grpc

        try:
            from ray._private.authentication.grpc_authentication_client_interceptor import (
                _get_authentication_metadata_tuple)

            metadata = tuple(_get_authentication_metadata_tuple())
        except Exception:  # noqa: BLE001 - no token support in this Ray: the call goes without one
            metadata = ()
        with grpc.insecure_channel(address) as channel:
            channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")(b"", timeout=5.0, metadata=metadata)
    except Exception as e:  # noqa: BLE001 - grpc's errors, or grpc missing
        code = getattr(e, "code", None)
        return callable(code) and getattr(code(), "name", "") == "UNAUTHENTICATED"
    return False


def kernel_address(ray: Any, cluster: RayCluster) -> str:
    """This kernel's address as the cluster's nodes would reach it: its address on the route to the head for a
    Ray Client kernel (``ray://`` in ``cluster.address``, or joined so with ``ray.init``), else its node's."""
    head = urlsplit(cluster.address).hostname if cluster.address.startswith("ray://") else None
    if head is None and is_client(ray):
        head = client_head()
    if head is not None:
        return address_toward(head)
    return str(ray.util.get_node_ip_address())


def _count(pool: Mapping[str, float], key: str) -> str:
    """``"2 CPUs"``: the amount of ``key`` in ``pool``."""
    amount = float(pool.get(key, 0))
    return f"{amount:g} {key}{'' if amount == 1 else 's'}"


def held_warm(ray: Any) -> dict[str, float]:
    """What this kernel's warm workers (:mod:`.warm`) on the cluster ``ray`` joined hold: their bundles' resources."""
    held: dict[str, float] = {}
    for workers in kept():
        try:  # Ray asks the cluster when it has not cached them
            bundles = getattr(workers.group, "bundle_specs", None) if workers.ray is ray else None
        except Exception:  # noqa: BLE001 - the group or the cluster is gone: it holds nothing here
            bundles = None
        for bundle in bundles or ():
            for key, amount in bundle.items():
                held[key] = held.get(key, 0.0) + float(amount)
    return held


def inventory(ray: Any, freed: Mapping[str, float] | None = None) -> str:
    """``"2 nodes with 1 free CPU and 0 free GPUs (of 2 CPUs, 0 GPUs)"``: what the cluster has now. ``freed``: what
    this launch just released of the kernel's warm workers; while Ray has not given it back, the text says so
    (its "0 free CPUs" is theirs, not another job's)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    free = ray.available_resources()
    total = ray.cluster_resources()
    pending = {k: v for k, v in (freed or {}).items() if k in ("CPU", "GPU") and float(free.get(k, 0)) < v}
    note = (f"; {' and '.join(_count(pending, k) for k in sorted(pending))} of them held until a moment ago by this "
            "kernel's warm workers from its last run, released for this launch") if pending else ""
    return (f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} with {_count(free, 'CPU').replace(' ', ' free ')} and "
            f"{_count(free, 'GPU').replace(' ', ' free ')} (of {_count(total, 'CPU')}, {_count(total, 'GPU')}{note})")


def _settle(ray: Any, freed: Mapping[str, float]) -> None:
    """Wait (at most :data:`SETTLE_SECONDS`) until what this launch released shows as free: Ray frees a removed
    reservation a moment later, and a refusal that said "0 free CPUs" then would blame no one."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while freed and time.monotonic() < deadline:
        free = ray.available_resources()
        if all(float(free.get(k, 0)) >= v for k, v in freed.items()):
            return
        time.sleep(0.1)


def _fits(ray: Any, workers: int, per_worker: Mapping[str, float], strategy: str) -> bool:
    """Whether the cluster's alive nodes could ever hold the run (ignoring what is busy now)."""
    capacity = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        have = node.get("Resources", {})
        fits = [math.floor(have.get(k, 0) / v + 1e-9) for k, v in per_worker.items() if v > 0]
        capacity.append(min(fits) if fits else workers)
    if strategy == "strict_pack":
        return any(c >= workers for c in capacity)
    if strategy == "strict_spread":
        return sum(1 for c in capacity if c >= 1) >= workers
    return sum(capacity) >= workers


def reserve(ray: Any, cluster: RayCluster, workers: int, restart_after: str = "",
            freed: Mapping[str, float] | None = None) -> Any:
    """A ready placement group of ``workers`` bundles of ``cluster.resources_per_worker`` (``freed``: what the
    launch released of the kernel's warm workers just before: see :func:`inventory`).

    A restart (``restart_after``: the failure it follows, often a lost node) waits the whole ``reserve_timeout`` for
    the room even when the live nodes cannot hold the run now: a replacement node may join meanwhile.

    Raises:
        LaunchError: the cluster cannot hold the run, or the reservation was not ready within
            ``cluster.reserve_timeout`` seconds (nothing stays reserved).
    """
    per_worker = {k: float(v) for k, v in cluster.resources_per_worker.items() if float(v) > 0}
    asked = f"the run asks for {workers} x {per_worker} ({cluster.placement})"
    if not restart_after and not _fits(ray, workers, per_worker, cluster.placement):
        bend = "" if cluster.placement == "pack" else ", placement='pack'"
        _settle(ray, freed or {})
        raise LaunchError(f"the Ray cluster cannot hold this run: it has {inventory(ray, freed)}; {asked}. Use fewer "
                          f"processes, smaller resources_per_worker{bend}, or add nodes")
    from ray.util.placement_group import placement_group

    name = group_name(ray.get_runtime_context().get_job_id(), secrets.token_hex(4))  # ray_leftovers finds it by name
    group = placement_group([dict(per_worker) for _ in range(workers)], strategy=_STRATEGY[cluster.placement],
                            name=name)
    ready, _ = ray.wait([group.ready()], timeout=cluster.reserve_timeout)
    if not ready:
        have = inventory(ray, freed)
        release_group(ray, group)
        if restart_after:
            fits = _fits(ray, workers, per_worker, cluster.placement)
            raise LaunchError(
                f"the restart after {restart_after} could not be placed within reserve_timeout="
                f"{cluster.reserve_timeout:g} s: the cluster has {have}; {asked}, and "
                + ("other jobs hold the room it needs" if fits else "its live nodes cannot hold that: the lost "
                   "node's place was not taken by another")
                + "; nothing is reserved. Add a node (or wait for the cluster to replace it) and launch again "
                "(load_state resumes from the last checkpoint), raise reserve_timeout, or use fewer processes")
        raise LaunchError(f"the Ray cluster could not reserve the run within reserve_timeout="
                          f"{cluster.reserve_timeout:g} s: it has {have}; {asked}. Other jobs hold the rest: wait, or "
                          "ask for less")
    return group


def release_group(ray: Any, group: Any) -> None:
    """Free a placement group (gone already is fine)."""
    try:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(group)
    except Exception:  # noqa: BLE001 - the cluster or the group is gone: nothing is held
        pass
