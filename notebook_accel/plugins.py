"""The small option objects an :class:`~notebook_accel.Accelerator` takes, with accelerate's names and defaults.

Each is a dataclass validated on construction, so a bad value fails where it is written (not deep inside a
training step) with a :class:`ConfigurationError` naming the field, the value and what is allowed.

accelerate's ``*Kwargs`` handlers are in :mod:`notebook_accel.kwargs_handlers`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from notebook_accel.errors import NotebookAccelError, shown

__all__ = [
    "ConfigurationError",
    "DataLoaderConfiguration",
    "ProjectConfiguration",
    "GradientAccumulationPlugin",
    "check_positive_int",
    "check_type",
    "fields_from_json",
    "resolve_accumulation",
    "resolve_loader_config",
]


class ConfigurationError(NotebookAccelError, ValueError):
    """An option has a value we cannot use: an Accelerator argument, an option object's field, an engine plugin's
    setting. The message names the option, the value, what is allowed and the fix.

    Raised where the option is written, one problem at a time. Its subclass
    :class:`~notebook_accel.config.ConfigError` is the same concept for a whole run configuration (a config
    file, a mapping, ``Config(...)``), raised once with every problem found; ``except ConfigurationError`` catches
    both.
    """


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
    given: dict[str, Any] = data if isinstance(data, dict) else {}
    unknown = sorted(set(given) - set(allowed)) if isinstance(data, dict) else ["<not an object>"]
    if unknown:
        raise ConfigurationError(f"{engine} settings from the launcher have unknown fields {unknown}; "
                                 f"allowed: {', '.join(sorted(allowed))}")
    return given


def check_type(owner: str, name: str, value: Any, types: tuple[type, ...], allowed: str) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is an instance of ``types`` (bools are not ints)."""
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        raise ConfigurationError(f"{owner}({name}={shown(value)}): expected {allowed}, got {type(value).__name__}")


def check_positive_int(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    """Raise unless ``value`` is an int >= ``minimum``."""
    check_type(owner, name, value, (int,), f"an integer >= {minimum}")
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
            check_type(owner, name, getattr(self, name), (bool,), "True or False")
        if self.dispatch_batches:
            check_type(owner, "dispatch_batches", self.dispatch_batches, (bool,), "None, True or False")
        if self.data_seed is not None:
            check_positive_int(owner, "data_seed", self.data_seed, minimum=0)


@dataclass
class ProjectConfiguration:
    """Where a run writes checkpoints and logs.

    Args:
        project_dir: base folder for checkpoints (``project_dir/checkpoints/checkpoint_<i>`` with automatic naming).
        logging_dir: folder for tracker logs; defaults to ``project_dir``.
        automatic_checkpoint_naming: name checkpoints by iteration inside ``project_dir``.
        total_limit: keep at most this many automatic checkpoints (oldest deleted).
        iteration: the number of the next automatic checkpoint.
        save_on_each_node: every machine keeps its own copy of a checkpoint (node-local disks): ``save_state``
            writes the shared files on each machine, not only on rank 0's, and each machine's ranks load their
            own copy.
        async_save: the default of ``save_state(async_save=...)``: snapshot the state into CPU memory, return, and
            write the checkpoint in the background (see docs/guides/checkpoints-background.md).

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
    save_on_each_node: bool = False
    async_save: bool = False

    def __post_init__(self) -> None:
        owner = "ProjectConfiguration"
        for name in ("project_dir", "logging_dir"):
            value = getattr(self, name)
            if value is not None:
                check_type(owner, name, value, (str, os.PathLike), "a folder path (str) or None")
                setattr(self, name, os.fspath(value))
        check_type(owner, "automatic_checkpoint_naming", self.automatic_checkpoint_naming, (bool,), "True or False")
        check_type(owner, "save_on_each_node", self.save_on_each_node, (bool,), "True or False")
        check_type(owner, "async_save", self.async_save, (bool,), "True or False")
        if self.total_limit is not None:
            check_positive_int(owner, "total_limit", self.total_limit)
        check_positive_int(owner, "iteration", self.iteration, minimum=0)
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
        check_positive_int(owner, "num_steps", self.num_steps)
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            check_type(owner, name, getattr(self, name), (bool,), "True or False")


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
