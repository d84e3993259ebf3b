"""The small option objects an :class:`~notebook_accel.Accelerator` takes, with accelerate's names and defaults.

Each is a dataclass validated on construction, so a bad value fails where it is written (not deep inside a
training step) with a :class:`ConfigurationError` naming the field, the value and what is allowed.

The ``*Kwargs`` handlers are passed in ``Accelerator(kwargs_handlers=[...])``; :meth:`KwargsHandler.to_kwargs`
returns only the fields that differ from the defaults, as accelerate does, so torch's own defaults apply to the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from datetime import timedelta
from collections.abc import Sequence
from typing import Any

from notebook_accel.errors import NotebookAccelError, shown

__all__ = [
    "AutocastKwargs",
    "ConfigurationError",
    "DataLoaderConfiguration",
    "ProjectConfiguration",
    "GradientAccumulationPlugin",
    "KwargsHandler",
    "DistributedDataParallelKwargs",
    "GradScalerKwargs",
    "InitProcessGroupKwargs",
    "resolve_handlers",
    "resolve_accumulation",
    "resolve_loader_config",
]


class ConfigurationError(NotebookAccelError, ValueError):
    """An Accelerator argument or option object has a value we cannot use; the message names the fix."""


def fields_from_json(text: str, allowed: Sequence[str], engine: str, argument: str) -> dict[str, Any]:
    """An engine plugin's fields read back from the JSON a launcher carried to its workers.

    Args:
        text: the JSON text.
        allowed: the plugin's field names.
        engine: the engine's name for messages (``"FSDP"``, ``"DeepSpeed"``).
        argument: the Accelerator argument that passes such a plugin in code (named in the fix).

    Raises:
        ConfigurationError: the text is not a JSON object of ``allowed`` fields.
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigurationError(f"{engine} settings from the launcher are not JSON ({e}): {text[:80]!r}; "
                                 f"launch again, or pass Accelerator({argument}=...)") from e
    unknown = sorted(set(data) - set(allowed)) if isinstance(data, dict) else ["<not an object>"]
    if unknown:
        raise ConfigurationError(f"{engine} settings from the launcher have unknown fields {unknown}; "
                                 f"allowed: {', '.join(sorted(allowed))}")
    return data  # type: ignore[no-any-return]


def _check_type(owner: str, name: str, value: Any, types: tuple[type, ...], allowed: str) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is an instance of ``types`` (bools are not ints)."""
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        raise ConfigurationError(f"{owner}({name}={shown(value)}): expected {allowed}, got {type(value).__name__}")


def _check_positive_int(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    """Raise unless ``value`` is an int >= ``minimum``."""
    _check_type(owner, name, value, (int,), f"an integer >= {minimum}")
    if value < minimum:
        raise ConfigurationError(f"{owner}({name}={shown(value)}): must be an integer >= {minimum}")


@dataclass
class DataLoaderConfiguration:
    """How :meth:`Accelerator.prepare` shards DataLoaders.

    Args:
        split_batches: False (default): every process takes whole batches (rank r gets batches r, r+n, ...), so
            the global batch is ``batch_size * num_processes``. True: each batch is sliced into ``num_processes``
            pieces (``batch_size`` must divide evenly).
        dispatch_batches: accelerate's "rank 0 loads and sends" mode. Accepted with any value: each process reads
            its own share, which gives it the batches rank 0 would have sent; True (or None with an iterable
            dataset, accelerate's default) makes prepared loaders :class:`~notebook_accel.DataLoaderDispatcher`.
        even_batches: pad the last round by cycling from the start of the epoch so every process does the same
            number of steps (ignored with ``drop_last=True``).
        use_seedable_sampler: False (default): a shuffle follows the DataLoader's own generator, so the prepared
            order is the plain loader's; rank 0's generator state is copied to every rank, and each epoch's start
            state is checkpointed (exact resume either way). True: a plain shuffle becomes a permutation that is a
            pure function of (seed, epoch), so ``set_epoch(e)`` replays epoch ``e``.
        data_seed: base seed for samplers that have no generator of their own and for ``use_seedable_sampler``;
            ``None`` draws one from torch's RNG at prepare time (rank 0's is used everywhere).
        non_blocking: pass ``non_blocking=True`` when moving batches to the device.
        use_stateful_dataloader: accepted with either value: every prepared loader has ``state_dict()`` /
            ``load_state_dict()`` and resumes mid-epoch, as accelerate's stateful (torchdata) loaders do, without
            torchdata.

    Raises:
        ConfigurationError: a field has the wrong type.

    Example:
        >>> DataLoaderConfiguration(even_batches=False, data_seed=0).even_batches
        False
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        owner = "DataLoaderConfiguration"
        for name in ("split_batches", "even_batches", "use_seedable_sampler", "non_blocking",
                     "use_stateful_dataloader"):
            _check_type(owner, name, getattr(self, name), (bool,), "True or False")
        if self.dispatch_batches:
            _check_type(owner, "dispatch_batches", self.dispatch_batches, (bool,), "None, True or False")
        if self.data_seed is not None:
            _check_positive_int(owner, "data_seed", self.data_seed, minimum=0)


@dataclass
class ProjectConfiguration:
    """Where a run writes checkpoints and logs.

    Args:
        project_dir: base folder for checkpoints (``project_dir/checkpoints/checkpoint_<i>`` with automatic naming).
        logging_dir: folder for tracker logs; defaults to ``project_dir``.
        automatic_checkpoint_naming: name checkpoints by iteration inside ``project_dir``.
        total_limit: keep at most this many automatic checkpoints (oldest deleted).
        iteration: the number of the next automatic checkpoint.

    Raises:
        ConfigurationError: a bad type, a negative limit or iteration, or automatic naming without ``project_dir``.

    Example:
        >>> ProjectConfiguration(project_dir="runs/a").logging_dir
        'runs/a'
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0

    def __post_init__(self) -> None:
        owner = "ProjectConfiguration"
        for name in ("project_dir", "logging_dir"):
            value = getattr(self, name)
            if value is not None:
                _check_type(owner, name, value, (str, os.PathLike), "a folder path (str) or None")
                setattr(self, name, os.fspath(value))
        _check_type(owner, "automatic_checkpoint_naming", self.automatic_checkpoint_naming, (bool,), "True or False")
        if self.total_limit is not None:
            _check_positive_int(owner, "total_limit", self.total_limit)
        _check_positive_int(owner, "iteration", self.iteration, minimum=0)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        if self.automatic_checkpoint_naming and self.project_dir is None:
            raise ConfigurationError(
                f"{owner}(automatic_checkpoint_naming=True) needs a project_dir to put checkpoints in; "
                "pass project_dir='...'"
            )

    def set_directories(self, project_dir: str | None = None) -> None:
        """Set ``project_dir`` (and ``logging_dir`` when it was not given)."""
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir


@dataclass
class GradientAccumulationPlugin:
    """Gradient accumulation options.

    Args:
        num_steps: batches per optimizer step (>= 1).
        adjust_scheduler: accepted for compatibility. As in accelerate 1.x in practice, the prepared scheduler
            steps only on real optimizer steps (``num_processes`` times each), so build schedulers in optimizer
            steps; this flag changes nothing.
        sync_with_dataloader: also sync (and step) on the last batch of a prepared loader.
        sync_each_batch: all-reduce gradients on every batch (less memory, more communication); the optimizer
            still steps every ``num_steps`` batches.

    Raises:
        ConfigurationError: ``num_steps`` missing or not an integer >= 1, or a flag that is not a bool.

    Example:
        >>> GradientAccumulationPlugin(num_steps=4).num_steps
        4
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        owner = "GradientAccumulationPlugin"
        if self.num_steps is None:
            raise ConfigurationError(f"{owner}(num_steps=None): num_steps is required, e.g. num_steps=4")
        _check_positive_int(owner, "num_steps", self.num_steps)
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            _check_type(owner, name, getattr(self, name), (bool,), "True or False")


class KwargsHandler:
    """Base of the ``*Kwargs`` handlers: :meth:`to_kwargs` gives the fields changed from their defaults."""

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the class default, as a dict."""
        default = self.__class__()
        names = [f.name for f in fields(self)]  # type: ignore[arg-type]
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
            _check_type(owner, name, getattr(self, name), (bool,), "True or False")
        _check_positive_int(owner, "bucket_cap_mb", self.bucket_cap_mb)
        _check_positive_int(owner, "dim", self.dim, minimum=0)


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
            _check_type(owner, name, getattr(self, name), (int, float), "a positive number")
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{owner}({name}={shown(getattr(self, name))}): must be > 0")
        if not self.backoff_factor < 1.0 < self.growth_factor:
            raise ConfigurationError(
                f"{owner}(growth_factor={shown(self.growth_factor)}, backoff_factor={shown(self.backoff_factor)}): "
                "need backoff_factor < 1 < growth_factor"
            )
        _check_positive_int(owner, "growth_interval", self.growth_interval)
        _check_type(owner, "enabled", self.enabled, (bool,), "True or False")


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
            _check_type(owner, "init_method", self.init_method, (str,), "a URL string such as 'env://'")
        if self.timeout is not None:
            _check_type(owner, "timeout", self.timeout, (timedelta,), "a datetime.timedelta")
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
        _check_type("AutocastKwargs", "enabled", self.enabled, (bool,), "True or False")
        if self.cache_enabled is not None:
            _check_type("AutocastKwargs", "cache_enabled", self.cache_enabled, (bool,), "True, False or None")


@dataclass
class ProfileKwargs(KwargsHandler):
    """Options for ``accelerator.profile()`` (accelerate's fields; see :mod:`notebook_accel.profiling`).

    Attributes:
        activities: ``["cpu"]``, ``["cpu", "cuda"]``...; ``None``: CPU, plus CUDA when the process uses a GPU.
        schedule_option: torch.profiler's schedule, e.g. ``{"wait": 1, "warmup": 1, "active": 3}``; ``None``
            records the whole block.
        on_trace_ready: called with the profiler when a scheduled cycle ends.
        record_shapes, profile_memory, with_stack, with_flops, with_modules: torch.profiler's switches.
        output_trace_dir: where each process writes its Chrome trace (``trace_rank<N>.json``) at the end.
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


def resolve_accumulation(steps: int | None, plugin: GradientAccumulationPlugin | None,
                         from_launch: int | None) -> GradientAccumulationPlugin:
    """The accumulation plugin: explicit plugin, else explicit steps, else the launch config, else 1."""
    if plugin is not None:
        if steps not in (None, 1, plugin.num_steps):
            raise ConfigurationError(f"gradient_accumulation_steps={shown(steps)} and gradient_accumulation_plugin "
                                     f"(num_steps={plugin.num_steps}) disagree; pass only one of them")
        return plugin
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigurationError(f"gradient_accumulation_steps={shown(steps)} is not allowed; pass a whole number >= 1 "
                                 "(1 means no accumulation)")
    return GradientAccumulationPlugin(num_steps=steps if steps is not None else (from_launch or 1))


def resolve_loader_config(config: DataLoaderConfiguration | None,
                          split_batches: bool | None) -> DataLoaderConfiguration:
    """``dataloader_config``, with a constructor ``split_batches=`` honoured (or refused when it conflicts)."""
    config = config if config is not None else DataLoaderConfiguration()
    if split_batches is None or split_batches == config.split_batches:
        return config
    if config.split_batches:
        raise ConfigurationError(f"split_batches={shown(split_batches)} conflicts with "
                                 "dataloader_config.split_batches=True; set it in one place")
    return DataLoaderConfiguration(**{**config.__dict__, "split_batches": split_batches})
