"""A checked launch, ready to run: the plan, the port, and each worker's launch environment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from notebook_accel.cluster import Cluster, cluster_devices, cluster_label
from notebook_accel.environment import EngineLaunch, LaunchEnvironment
from notebook_accel.errors import LaunchError, shown
from notebook_accel.events import Sink
from notebook_accel.launcher import accelerate_args
from notebook_accel.launcher.rendezvous.ports import check_port_free, free_port

__all__ = ["Plan", "choose_port", "environments", "function_name", "cluster_devices", "cluster_label"]


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything one attempt of a checked launch needs (built with keywords only: twenty fields, several of one
    type, are too many to pass by position)."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    devices: list[str]
    backend: str
    precision: str | None
    steps: int | None
    node: int
    nodes: int
    master_addr: str
    port: int | None
    limit: float | None
    in_process: bool
    dashboard: bool | Sink | None
    show_all_ranks: bool
    prefix: str | None
    rdzv: accelerate_args.Rendezvous
    block: bool
    engine: EngineLaunch | None  # the sharded engine the launch config asks for, sent to every worker
    engine_label: str = ""  # that engine as the header names it ("" without a config)
    cluster: Cluster | None = None  # where the workers run when not forked here (a placement of notebook_accel.cluster)
    fp8: str | None = None  # the config's fp8_config switches (JSON) for mixed_precision="fp8", sent to every worker


def choose_port(port: int | None, master_addr: str, node_rank: int) -> int:
    """The user's port (checked on node 0, which serves the rendezvous) or a free one."""
    if port is not None:
        if node_rank == 0:
            check_port_free(port, master_addr)
        return port
    try:
        return free_port(master_addr)
    except OSError as e:
        raise LaunchError(
            f"master_addr={shown(master_addr)} is not an address of this machine ({e}); use '127.0.0.1' for a "
            "single machine, or this machine's address on the network for node 0"
        ) from e


def environments(
    devices: Sequence[str], node_rank: int, num_nodes: int, master_addr: str, port: int,
    mixed_precision: str | None, gradient_accumulation_steps: int | None, extra_vars: dict[str, str],
    engine: EngineLaunch | None = None, fp8: str | None = None,
) -> list[LaunchEnvironment]:
    """One launch environment per local worker; global rank = node_rank * local workers + local rank."""
    local = len(devices)
    return [
        LaunchEnvironment(
            rank=node_rank * local + i, local_rank=i, world_size=num_nodes * local, local_world_size=local,
            master_addr=master_addr, master_port=port, device=device, mixed_precision=mixed_precision,
            gradient_accumulation_steps=gradient_accumulation_steps, launched=True,
            extra_vars=tuple(extra_vars.items()), engine=engine, fp8=fp8,
        )
        for i, device in enumerate(devices)
    ]


def function_name(function: Callable[..., Any]) -> str:
    """``train`` for a function, the class name for another callable."""
    return str(getattr(function, "__qualname__", None) or type(function).__name__)
