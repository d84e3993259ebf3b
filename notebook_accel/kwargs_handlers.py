"""accelerate's ``*Kwargs`` handlers, passed in ``Accelerator(kwargs_handlers=[...])`` (and ``AutocastKwargs`` /
``ProfileKwargs`` to the block that uses them).

Each is a dataclass validated on construction, like the option objects of :mod:`notebook_accel.plugins`;
:meth:`KwargsHandler.to_kwargs` returns only the fields that differ from the defaults, as accelerate does, so
torch's own defaults apply to the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, ClassVar

from notebook_accel.errors import shown
from notebook_accel.plugins import ConfigurationError, check_positive_int, check_type

__all__ = [
    "AutocastKwargs",
    "DistributedDataParallelKwargs",
    "GradScalerKwargs",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "ProfileKwargs",
    "resolve_handlers",
]


class KwargsHandler:
    """Base of the ``*Kwargs`` handlers: :meth:`to_kwargs` gives the fields changed from their defaults."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every handler is a dataclass: ``fields(self)`` works

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the class default, as a dict."""
        default = self.__class__()
        names = [f.name for f in fields(self)]
        return {n: getattr(self, n) for n in names if getattr(self, n) != getattr(default, n)}


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options passed to ``torch.nn.parallel.DistributedDataParallel`` (torch's names and defaults).

    Example:
        >>> DistributedDataParallelKwargs(find_unused_parameters=True).to_kwargs()
        {'find_unused_parameters': True}
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False

    def __post_init__(self) -> None:
        owner = "DistributedDataParallelKwargs"
        for name in ("broadcast_buffers", "find_unused_parameters", "check_reduction", "gradient_as_bucket_view",
                     "static_graph"):
            check_type(owner, name, getattr(self, name), (bool,), "True or False")
        check_positive_int(owner, "bucket_cap_mb", self.bucket_cap_mb)
        check_positive_int(owner, "dim", self.dim, minimum=0)


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Options for the fp16 ``torch.amp.GradScaler`` (torch's names and defaults).

    Example:
        >>> GradScalerKwargs(init_scale=1024.0).to_kwargs()
        {'init_scale': 1024.0}
    """

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True

    def __post_init__(self) -> None:
        owner = "GradScalerKwargs"
        for name in ("init_scale", "growth_factor", "backoff_factor"):
            check_type(owner, name, getattr(self, name), (int, float), "a positive number")
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{owner}({name}={shown(getattr(self, name))}): must be > 0")
        if not self.backoff_factor < 1.0 < self.growth_factor:
            raise ConfigurationError(
                f"{owner}(growth_factor={shown(self.growth_factor)}, backoff_factor={shown(self.backoff_factor)}): "
                "need backoff_factor < 1 < growth_factor"
            )
        check_positive_int(owner, "growth_interval", self.growth_interval)
        check_type(owner, "enabled", self.enabled, (bool,), "True or False")


_BACKENDS = ("gloo", "nccl", "mpi")


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for ``torch.distributed.init_process_group``.

    Args:
        backend: ``"gloo"``, ``"nccl"`` or ``"mpi"``; ``None`` (our default, where accelerate writes "nccl" and
            then ignores it) picks nccl for CUDA devices and gloo otherwise.
        init_method: rendezvous URL; ``None`` means ``"env://"`` (MASTER_ADDR/MASTER_PORT).
        timeout: how long collectives wait before failing; ``None`` keeps torch's default.

    Raises:
        ConfigurationError: an unknown backend, or a timeout that is not a positive ``timedelta``.

    Example:
        >>> from datetime import timedelta
        >>> InitProcessGroupKwargs(timeout=timedelta(seconds=60)).timeout.total_seconds()
        60.0
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        owner = "InitProcessGroupKwargs"
        if self.backend is not None and self.backend not in _BACKENDS:
            raise ConfigurationError(
                f"{owner}(backend={shown(self.backend)}): unknown backend; allowed: {', '.join(_BACKENDS)} "
                "or None (auto)"
            )
        if self.init_method is not None:
            check_type(owner, "init_method", self.init_method, (str,), "a URL string such as 'env://'")
        if self.timeout is not None:
            check_type(owner, "timeout", self.timeout, (timedelta,), "a datetime.timedelta")
            if self.timeout.total_seconds() <= 0:
                raise ConfigurationError(f"{owner}(timeout={shown(self.timeout)}): must be a positive duration")


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options for one ``accelerator.autocast(autocast_handler=AutocastKwargs(...))`` block.

    Unlike accelerate, it is not taken in ``Accelerator(kwargs_handlers=...)``: pass it to ``autocast`` for the
    block that needs it (a handler there would have to reach every prepared model's forward).

    Attributes:
        enabled: ``False`` runs the block in full precision.
        cache_enabled: ``torch.autocast``'s weight-cast cache switch (``None``: torch's default).

    Example:
        >>> AutocastKwargs(enabled=False).to_kwargs()
        {'enabled': False}
    """

    enabled: bool = True
    cache_enabled: bool | None = None

    def __post_init__(self) -> None:
        check_type("AutocastKwargs", "enabled", self.enabled, (bool,), "True or False")
        if self.cache_enabled is not None:
            check_type("AutocastKwargs", "cache_enabled", self.cache_enabled, (bool,), "True, False or None")


@dataclass
class ProfileKwargs(KwargsHandler):
    """Options for ``accelerator.profile()`` (accelerate's fields; see :mod:`notebook_accel.profiling`).

    Attributes:
        activities: ``["cpu"]``, ``["cpu", "cuda"]``...; ``None``: CPU, plus CUDA when the process uses a GPU.
        schedule_option: torch.profiler's schedule, e.g. ``{"wait": 1, "warmup": 1, "active": 3}``; ``None``
            records the whole block.
        on_trace_ready: called with the profiler when a scheduled cycle ends.
        record_shapes, profile_memory, with_stack, with_flops, with_modules: torch.profiler's switches.
        output_trace_dir: where each process writes its Chrome trace (``profile_<N>.json``, as accelerate names it) at the end.
    """

    activities: Any = None
    schedule_option: Any = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: Any = None


HANDLER_TYPES: tuple[type, ...] = (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs,
                                   ProfileKwargs)


def resolve_handlers(kwargs_handlers: Sequence[KwargsHandler] | None) -> tuple[
        DistributedDataParallelKwargs | None, GradScalerKwargs | None, InitProcessGroupKwargs | None]:
    """``Accelerator(kwargs_handlers=)`` as ``(ddp, scaler, init)``: at most one of each; anything else is an error."""
    found: dict[type, Any] = {}
    for handler in kwargs_handlers or ():
        kind = next((k for k in HANDLER_TYPES if isinstance(handler, k)), None)
        if isinstance(handler, AutocastKwargs):
            raise ConfigurationError(f"kwargs_handlers: {handler!r} is not taken here; pass it to the block that "
                                     "needs it: with accelerator.autocast(autocast_handler=AutocastKwargs(...))")
        if kind is None:
            raise ConfigurationError(f"kwargs_handlers: unsupported {shown(handler)}; allowed: "
                                     f"{', '.join(k.__name__ for k in HANDLER_TYPES)}")
        if kind in found:
            raise ConfigurationError(f"kwargs_handlers: two {kind.__name__} given; pass each kind at most once")
        found[kind] = handler
    return (found.get(DistributedDataParallelKwargs), found.get(GradScalerKwargs), found.get(InitProcessGroupKwargs))
