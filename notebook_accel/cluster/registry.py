"""The placements by name: one torch-free spec each, the only place that lists them.

A run's workers are forked on this machine unless ``cluster=`` (or a config's ``cluster:`` section) names another
placement. A :class:`PlacementSpec` says what the rest of the package needs to know about one without importing it:
its name (which is also the config's ``kind`` and the CLI's ``--cluster`` value), its request class (the value of
``cluster=``), the config keys of that request, the words the header and the launch phase use, how it counts the
workers' devices, its CLI flags, and where its placement (:mod:`notebook_accel.launcher.placement`) and its picker
section (``widgets/``) live, imported only when a run starts or a picker opens. The launcher, the config, the picker
and the CLI ask this registry and never name a placement; adding one is a spec here and its folder under
``launcher/placement/``.

Importing this module imports neither torch nor any cluster's client library.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from notebook_accel.errors import LaunchError, shown

__all__ = ["Cluster", "PlacementSpec", "SPEC_PATHS", "specs", "spec_named", "spec_of", "check_cluster",
           "cluster_devices", "cluster_label", "one_device_each", "cluster_from_flags", "add_cluster_flags"]

#: ``"module:NAME"`` of every placement spec but the local fork, in the order the picker and the CLI list them.
SPEC_PATHS: tuple[str, ...] = (
    "notebook_accel.cluster.ray_spec:RAY",
    "notebook_accel.cluster.slurm:SLURM",
)


class Cluster(Protocol):
    """What the launcher asks of any cluster request (:class:`~notebook_accel.cluster.RayCluster`, ...)."""

    @property
    def uses_gpu(self) -> bool:
        """Whether each worker drives a GPU (nccl) rather than the CPU (gloo)."""
        ...

    def describe(self) -> str:
        """The request in words, for the header and errors."""
        ...


def _load(path: str) -> Any:
    """The object at ``"package.module:name"``, imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class PlacementSpec:
    """One placement of the workers away from this machine, described without importing it.

    Attributes:
        name: ``cluster="ray"``, the config's ``kind: ray`` and the CLI's ``--cluster ray``.
        title: the picker's choice and the header's words (``"Ray cluster"``).
        cluster_class: the request class (frozen dataclass whose fields are the config keys).
        fields: the config keys of the request (``kind`` aside).
        placement_path: ``"module:Class"`` of the placement; ``Class(cluster, descriptors, restart_after)``.
        picker_path: ``"module:Class"`` of its "Where it runs" controls in the config picker (``widgets/``).
        starting: the launch phase's words after ``starting N worker processes``.
        devices: ``(cluster, num_processes, use_cpu) -> (devices, backend)``: each worker's device as the worker
            sees it, and the backend (after the checks every cluster shares, :func:`cluster_devices`).
        label: the header's words for a request (``"Ray cluster"``, ``"Ray cluster ray://head:10001"``).
        add_flags: adds its own ``notebook-accel launch`` flags to a parser.
        from_flags: ``(base, args) -> cluster``: the config's request of this kind (``None``: none) overridden
            by those flags.
    """

    name: str
    title: str
    cluster_class: type
    fields: tuple[str, ...]
    placement_path: str
    picker_path: str
    starting: str
    devices: Callable[[Any, int, bool | None], tuple[list[str], str]]
    label: Callable[[Any], str]
    add_flags: Callable[[argparse.ArgumentParser], None]
    from_flags: Callable[[Any, argparse.Namespace], Any]

    @property
    def kind(self) -> str:
        """The config's ``kind:`` value (the name)."""
        return self.name

    def parse(self, fields: Mapping[str, Any]) -> Any:
        """The request from a config section's keys (``kind`` removed).

        Raises:
            LaunchError: a key the request does not have, or a value it refuses.
        """
        unknown = sorted(set(fields) - set(self.fields))
        if unknown:
            raise LaunchError(f"cluster: unknown keys {unknown}; the keys are kind, {', '.join(self.fields)}")
        return self.cluster_class(**fields)

    def placement(self, cluster: Any, descriptors: Any = None, restart_after: str = "") -> Any:
        """A new placement for ``cluster`` (imports the placement's modules, not yet its client library)."""
        return _load(self.placement_path)(cluster, descriptors, restart_after)

    def picker(self) -> Any:
        """A new picker section (imports ipywidgets)."""
        return _load(self.picker_path)()


def specs() -> tuple[PlacementSpec, ...]:
    """Every placement spec, in :data:`SPEC_PATHS` order."""
    return tuple(_load(path) for path in SPEC_PATHS)


def spec_named(name: str) -> PlacementSpec | None:
    """The spec called ``name`` (any case), or ``None``."""
    return next((s for s in specs() if s.name == name.lower()), None)


def spec_of(cluster: object) -> PlacementSpec:
    """The spec whose request ``cluster`` is.

    Raises:
        LaunchError: ``cluster`` is no placement's request.
    """
    for spec in specs():
        if isinstance(cluster, spec.cluster_class):
            return spec
    raise LaunchError(f"cluster={shown(cluster)} is not allowed; {_forms()}")


def _names() -> list[str]:
    return [s.name for s in specs()]


def _forms() -> str:
    classes = ", ".join(f"{s.cluster_class.__name__}(...)" for s in specs())
    names = ", ".join(repr(n) for n in _names())
    return f"use None (this machine), {names}, or {classes}"


def check_cluster(value: object) -> Any:
    """The cluster that ``notebook_launcher(cluster=...)`` or a config's ``cluster:`` names, checked.

    ``None`` (this machine), a placement's name (``"ray"``: its request with the defaults), a request
    (:class:`~notebook_accel.cluster.RayCluster`, ...), or a mapping of a request's fields with ``kind:`` naming
    the placement (the YAML form; ``kind`` defaults to the first placement, ``ray``).

    Raises:
        LaunchError: anything else, naming the value and the allowed forms.

    Example:
        >>> check_cluster({"kind": "ray", "address": "ray://head:10001", "placement": "spread"}).placement
        'spread'
    """
    if value is None:
        return None
    for spec in specs():
        if isinstance(value, spec.cluster_class):
            return value
    if isinstance(value, str):
        named = spec_named(value)
        if named is not None:
            return named.cluster_class()
    if isinstance(value, Mapping):
        fields = dict(value)
        kind = fields.pop("kind", specs()[0].name)
        of_kind = spec_named(kind) if isinstance(kind, str) else None
        if of_kind is None:
            raise LaunchError(f"cluster kind {shown(kind)} is not supported; use kind: {' or kind: '.join(_names())}")
        return of_kind.parse(fields)
    raise LaunchError(f"cluster={shown(value)} is not allowed; {_forms()}")


def cluster_devices(cluster: Any, num_processes: int | None, gpu_ids: object, use_cpu: bool | None,
                    num_nodes: int) -> tuple[list[str], str]:
    """Each worker's device and the backend for a run on ``cluster`` (its spec decides: a Ray worker's reserved GPU
    shows as ``cuda:0``), after the checks every cluster shares.

    Raises:
        LaunchError: no ``num_processes``, or an argument that only means something on this machine.
    """
    spec = spec_of(cluster)
    if num_processes is None:
        raise LaunchError("num_processes is needed with a cluster: how many workers to place, e.g. "
                          f"notebook_launcher(train, num_processes=8, cluster={spec.name!r})")
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or not 1 <= num_processes <= 100_000:
        raise LaunchError(f"num_processes={shown(num_processes)} is not allowed; pass a whole number from 1 to 100000")
    if num_nodes != 1:
        raise LaunchError(f"num_nodes={num_nodes} with a cluster is not allowed: the {spec.title} places the "
                          "workers on its nodes; leave num_nodes and node_rank out")
    if gpu_ids is not None:
        raise LaunchError(f"gpu_ids={shown(gpu_ids)} with a cluster is not allowed: the {spec.title} gives each "
                          f"worker its GPU; ask for GPUs in the request ({cluster.describe()})")
    return spec.devices(cluster, num_processes, use_cpu)


def one_device_each(cluster: Cluster, num_processes: int, use_cpu: bool | None,
                    fix: str) -> tuple[list[str], str]:
    """The devices of a cluster whose workers each drive one GPU (the one the cluster gives it, seen as ``cuda:0``)
    with nccl, or the CPU with gloo; ``use_cpu`` with GPU workers is refused, saying ``fix``."""
    if use_cpu and cluster.uses_gpu:
        raise LaunchError(f"use_cpu=True asks for CPU workers but {cluster.describe()}: a GPU per worker; {fix}")
    device = "cuda:0" if cluster.uses_gpu else "cpu"
    return [device] * num_processes, "nccl" if cluster.uses_gpu else "gloo"


def cluster_label(cluster: Any) -> str:
    """The header's words for where the workers run (``""``: this machine)."""
    return "" if cluster is None else spec_of(cluster).label(cluster)


def add_cluster_flags(add: Callable[..., Any], parser: argparse.ArgumentParser) -> None:
    """``--cluster NAME`` (added with ``add(parser, name, **kwargs)``) and every placement's own flags."""
    add(parser, "cluster", choices=_names(), help="run the processes on a cluster (or the config's cluster:)")
    for spec in specs():
        spec.add_flags(parser)


def cluster_from_flags(base: object, args: argparse.Namespace) -> Any:
    """The config's cluster ``base`` (``None``: none) as ``--cluster`` and the placements' flags change it
    (``None``: run on this machine)."""
    kind: str | None = getattr(args, "cluster", None)
    if kind is None and base is None:
        return None
    spec = spec_named(kind) if kind is not None else spec_of(base)
    if spec is None:
        raise LaunchError(f"--cluster {kind} is not allowed; use one of {_names()}")
    return spec.from_flags(base if isinstance(base, spec.cluster_class) else None, args)

