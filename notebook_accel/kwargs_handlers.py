"""accelerate's ``*Kwargs`` handlers, passed in ``Accelerator(kwargs_handlers=[...])`` (and ``AutocastKwargs`` /
``ProfileKwargs`` to the block that uses them).

Each is a dataclass validated on construction, like the option objects of :mod:`notebook_accel.plugins`;
:meth:`KwargsHandler.to_kwargs` returns only the fields that differ from the defaults, as accelerate does, so
torch's own defaults apply to the rest.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from enum import Enum
from typing import Any, ClassVar

from notebook_accel.errors import shown
from notebook_accel.plugins import ConfigurationError, check_positive_int, check_type

__all__ = [
    "AORecipeKwargs",
    "AutocastKwargs",
    "DDPCommunicationHookType",
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


class DDPCommunicationHookType(str, Enum):
    """How DDP communicates gradients (accelerate's names and values): ``NO`` (all-reduce in full precision),
    ``FP16``/``BF16`` (compress each bucket to half precision for the all-reduce), ``POWER_SGD`` and
    ``BATCHED_POWER_SGD`` (low-rank PowerSGD compression, per tensor or per bucket); torch's hooks of
    ``torch.distributed.algorithms.ddp_comm_hooks`` do the work (see :mod:`notebook_accel.comm_hooks`)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


_WRAPPERS = (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16)
_POWER_SGD = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
_COMM_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")


def _hook_type(name: str, value: Any, allowed: Sequence[DDPCommunicationHookType]) -> DDPCommunicationHookType:
    """``value`` (a member or its string value, any case) as a member of ``allowed``."""
    text = value.value if isinstance(value, DDPCommunicationHookType) else value
    member = next((m for m in allowed if isinstance(text, str) and m.value == text.lower()), None)
    if member is None:
        raise ConfigurationError(f"DistributedDataParallelKwargs({name}={shown(value)}): allowed: "
                                 f"{', '.join(f'DDPCommunicationHookType.{m.name}' for m in allowed)} "
                                 f"(or {', '.join(repr(m.value) for m in allowed)})")
    return member


def _check_power_sgd_options(options: dict[str, Any]) -> None:
    """Raise unless every key of ``options`` is a parameter of torch's ``PowerSGDState``."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    allowed = [name for name in inspect.signature(PowerSGDState).parameters if name != "process_group"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigurationError(f"DistributedDataParallelKwargs(comm_state_option={shown(options)}): unknown "
                                 f"PowerSGDState options {unknown}; allowed: {', '.join(allowed)}")


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options passed to ``torch.nn.parallel.DistributedDataParallel`` (torch's names and defaults), and
    accelerate's communication hook for it.

    Args:
        comm_hook: how gradients are communicated (a :class:`DDPCommunicationHookType` or its value, e.g.
            ``"power_sgd"``); registered on the DDP model when one is built (more than one process).
        comm_wrapper: ``FP16``/``BF16`` compresses what ``comm_hook`` sends (e.g. PowerSGD's factors) to half
            precision; needs a ``comm_hook``.
        comm_state_option: ``PowerSGDState``'s options (``matrix_approximation_rank``, ``start_powerSGD_iter``,
            ``warm_start``, ...), for ``POWER_SGD``/``BATCHED_POWER_SGD`` only.

    Raises:
        ConfigurationError: a bad value, a wrapper without a hook, or state options for a hook without state.

    Example:
        >>> DistributedDataParallelKwargs(find_unused_parameters=True).to_kwargs()
        {'find_unused_parameters': True}
        >>> DistributedDataParallelKwargs(comm_hook="power_sgd").comm_hook
        <DDPCommunicationHookType.POWER_SGD: 'power_sgd'>
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "DistributedDataParallelKwargs"
        for name in ("broadcast_buffers", "find_unused_parameters", "check_reduction", "gradient_as_bucket_view",
                     "static_graph"):
            check_type(owner, name, getattr(self, name), (bool,), "True or False")
        check_positive_int(owner, "bucket_cap_mb", self.bucket_cap_mb)
        check_positive_int(owner, "dim", self.dim, minimum=0)
        self.comm_hook = _hook_type("comm_hook", self.comm_hook, list(DDPCommunicationHookType))
        self.comm_wrapper = _hook_type("comm_wrapper", self.comm_wrapper, _WRAPPERS)
        check_type(owner, "comm_state_option", self.comm_state_option, (dict,), "a dict of PowerSGDState options")
        if self.comm_wrapper != DDPCommunicationHookType.NO and self.comm_hook == DDPCommunicationHookType.NO:
            raise ConfigurationError(f"{owner}(comm_wrapper={self.comm_wrapper.name}): a wrapper compresses what a "
                                     "comm_hook sends, and comm_hook is NO; pass comm_hook= too (e.g. POWER_SGD), or "
                                     f"comm_hook={self.comm_wrapper.name} alone to compress the plain all-reduce")
        _check_power_sgd_options(self.comm_state_option)
        if self.comm_state_option and self.comm_hook not in _POWER_SGD:
            raise ConfigurationError(f"{owner}(comm_state_option={shown(self.comm_state_option)}): only PowerSGD "
                                     f"has state options, and comm_hook is {self.comm_hook.name}; pass "
                                     "comm_hook=POWER_SGD or BATCHED_POWER_SGD, or drop comm_state_option")

    def to_kwargs(self) -> dict[str, Any]:
        """The changed DDP constructor options (the communication hook is registered after, not passed)."""
        return {k: v for k, v in super().to_kwargs().items() if k not in _COMM_FIELDS}


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
from enum import Enum
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


@dataclass
class AORecipeKwargs(KwargsHandler):
    """fp8 training through torchao's float8 ``Linear`` (``mixed_precision="fp8"``; accelerate's fields).

    Attributes:
        config: a ``torchao.float8.Float8LinearConfig`` used as is (``Float8LinearConfig(emulate=True)`` runs
            anywhere, slowly); ``None`` builds one from the two switches below and the launch config.
        module_filter_func: ``(module, fqn) -> bool``, which ``Linear`` layers to convert; ``None`` converts all
            but the first and last. Layers whose dimensions are not multiples of 16 are never converted.
        pad_inner_dim: pad matmul dimensions to multiples of 16 (``None``: True).
        enable_fsdp_float8_all_gather: FSDP2 gathers weights in float8 (``None``: True under FSDP).

    Example:
        >>> AORecipeKwargs(pad_inner_dim=False).to_kwargs()
        {'pad_inner_dim': False}
    """

    config: Any = None
    module_filter_func: Any = None
    pad_inner_dim: bool | None = None
    enable_fsdp_float8_all_gather: bool | None = None

    def __post_init__(self) -> None:
        if self.module_filter_func is not None and not callable(self.module_filter_func):
            raise ConfigurationError(f"AORecipeKwargs(module_filter_func={shown(self.module_filter_func)}): expected "
                                     "a function (module, fqn) -> bool, or None")
        for name in ("pad_inner_dim", "enable_fsdp_float8_all_gather"):
            if getattr(self, name) is not None:
                check_type("AORecipeKwargs", name, getattr(self, name), (bool,), "True, False or None")


HANDLER_TYPES: tuple[type, ...] = (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs,
                                   ProfileKwargs, AORecipeKwargs)


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
