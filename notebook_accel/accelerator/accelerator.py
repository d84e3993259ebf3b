"""The :class:`Accelerator`: accelerate's training API as a thin facade over small modules.

Each method delegates to the module that owns the concept: process state (:mod:`~notebook_accel.state`), data
(:mod:`~notebook_accel.data`), model (:mod:`~notebook_accel.model`), optimizer and scheduler wrappers, mixed
precision (:mod:`~notebook_accel.precision`), collectives (:mod:`~notebook_accel.ops`), checkpointing and
tracking. Nothing is a singleton: two Accelerators in one process share only torch's process group.

Example:
    >>> accelerator = Accelerator(cpu=True)
    >>> model = torch.nn.Linear(2, 1)
    >>> model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> accelerator.backward(model(torch.ones(1, 2)).sum()); optimizer.step(); optimizer.zero_grad()
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from notebook_accel import ops
from notebook_accel.accelerator.accelerate_methods import AccelerateMethods
from notebook_accel.accelerator.arguments import check_accelerator_arguments
from notebook_accel.accelerator.collectives import gather_for_metrics
from notebook_accel.accelerator.models import user_module
from notebook_accel.accelerator.preparing import (models_training, record_loader, record_prepared,
                                                  refuse_dispatch_slicing, scheduler_optimizers)
from notebook_accel.accelerator.process_facade import ProcessFacade
from notebook_accel.accelerator.saving import save_checkpoint
from notebook_accel.accelerator.tracking import open_trackers
from notebook_accel.argument_checks import checked_clip_arguments, checked_log_arguments, checked_log_kwargs
from notebook_accel.data import PreparedDataLoader, prepare_data_loader
from notebook_accel.data.standalone_prepare import mark_dispatching
from notebook_accel.engines.label import report_engine
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.float8.recipe import float8_training
from notebook_accel.gradient_state import GradientState
from notebook_accel.kwargs_handlers import KwargsHandler, ProfileKwargs, resolve_handlers
from notebook_accel.monitor import steps
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.plugins import (ConfigurationError, DataLoaderConfiguration, GradientAccumulationPlugin,
                                    ProjectConfiguration, resolve_accumulation, resolve_loader_config)
from notebook_accel.precision import MixedPrecision, autocast_context, resolve_mixed_precision
from notebook_accel.scheduler import AcceleratedScheduler
from notebook_accel.state import ProcessState

if TYPE_CHECKING:  # the FSDP and DeepSpeed modules are slow to import: loaded only when a plugin asks
    from notebook_accel.engines import Engine
    from notebook_accel.engines.deepspeed.plugin import DeepSpeedPlugin
    from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin

__all__ = ["Accelerator"]

_SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


class Accelerator(AccelerateMethods, ProcessFacade):
    """Runs a PyTorch training loop on 1 or N processes, CPU or GPU, with accelerate's API.

    Args:
        device_placement: move prepared models and batches to :attr:`device`.
        split_batches: slice each batch across processes (same as ``DataLoaderConfiguration(split_batches=)``).
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"``, ``"fp8"``; ``None`` takes the launch config's, else ``"no"``.
        gradient_accumulation_steps: batches per optimizer step; ``None`` takes the launch config's, else 1.
        cpu: use the CPU even when CUDA is available.
        dataloader_config: how loaders are sharded.
        rng_types: accepted for compatibility (shuffling here is seeded by (seed, epoch), needing no RNG sync).
        log_with: trackers (``"jsonl"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"comet_ml"``, ``"aim"``,
            ``"dvclive"``, ``"all"``, instances, a list); a tracker whose package is missing raises here.
        project_dir: folder for checkpoints and logs.
        project_config: a :class:`ProjectConfiguration`.
        gradient_accumulation_plugin: full accumulation options (exclusive with ``gradient_accumulation_steps``).
        step_scheduler_with_optimizer: prepared schedulers step with the real optimizer steps.
        kwargs_handlers: DistributedDataParallelKwargs / GradScalerKwargs / InitProcessGroupKwargs / AORecipeKwargs.
        fsdp_plugin: shard models with torch's ``fully_shard`` (a ``FullyShardedDataParallelPlugin``); ``None``
            takes the launch config's (``distributed_type: FSDP``), else plain DDP. Ignored in one process.
        deepspeed_plugin: train with DeepSpeed ZeRO (a ``DeepSpeedPlugin``, needs ``pip install
            notebook-accel[deepspeed]``); ``None`` takes the launch config's (``distributed_type: DEEPSPEED``).
        log_system_metrics: also send the run's system figures to the trackers started by :meth:`init_trackers`
            (not to the dashboard, which has its own panel): with each :meth:`log` after a new sample (about once a
            second), ``system/rank<r>/cpu_percent``, ``memory_gib``, ``gpu_utilization``, ``step_data_frac``... of
            every rank on this machine (see :data:`notebook_accel.monitor.board.FIELDS`). Only in runs started by
            ``notebook_launcher``, where the kernel measures them; elsewhere a warning says nothing is sent.

    Process properties and helpers (``device``, ``process_index``, ``is_main_process``, ``print``,
    ``wait_for_everyone``, ``main_process_first``, ``on_main_process``, ``split_between_processes``, ...) come
    from :class:`~notebook_accel.accelerator.process_facade.ProcessFacade`; accelerate's thinner extras (hooks,
    ``save``, ``free_memory``, ``set_seed``, the trigger, ...) from :class:`.accelerate_methods.AccelerateMethods`.

    Raises:
        ConfigurationError: a bad value (the message lists the allowed ones).
        ProcessGroupError: the process group cannot be formed.
    """

    def __init__(self, device_placement: bool = True, split_batches: bool | None = None,
                 mixed_precision: str | None = None, gradient_accumulation_steps: int | None = None,
                 cpu: bool = False, dataloader_config: DataLoaderConfiguration | None = None,
                 rng_types: list[str] | None = None, log_with: Any = None, project_dir: str | None = None,
                 project_config: ProjectConfiguration | None = None,
                 gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
                 step_scheduler_with_optimizer: bool = True,
                 kwargs_handlers: Sequence[KwargsHandler] | None = None,
                 fsdp_plugin: FullyShardedDataParallelPlugin | None = None,
                 deepspeed_plugin: DeepSpeedPlugin | None = None, log_system_metrics: bool = False) -> None:
        check_accelerator_arguments(
            device_placement=device_placement, split_batches=split_batches, cpu=cpu,
            dataloader_config=dataloader_config, rng_types=rng_types, project_dir=project_dir,
            project_config=project_config, step_scheduler_with_optimizer=step_scheduler_with_optimizer,
            kwargs_handlers=kwargs_handlers, log_system_metrics=log_system_metrics)
        env = LaunchEnvironment.from_environ()
        ddp, scaler, init = resolve_handlers(kwargs_handlers)
        # every option is checked before the group forms
        self._profile_handler = next((h for h in kwargs_handlers or () if isinstance(h, ProfileKwargs)), None)
        self._mixed_precision: MixedPrecision = resolve_mixed_precision(mixed_precision, env.mixed_precision)
        plugin = resolve_accumulation(gradient_accumulation_steps, gradient_accumulation_plugin,
                                      env.gradient_accumulation_steps)
        self.dataloader_config = resolve_loader_config(dataloader_config, split_batches)
        self.state = ProcessState(cpu=cpu, init_kwargs=init, env=env)
        self.gradient_state = GradientState(plugin.num_steps or 1, plugin.sync_with_dataloader, plugin.sync_each_batch)
        self.project_configuration = project_config if project_config is not None else ProjectConfiguration()
        if project_dir is not None and self.project_configuration.project_dir is None:
            self.project_configuration.set_directories(project_dir)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = rng_types
        self.ddp_handler = ddp
        from notebook_accel.engines.select import select_engine

        self._engine, self.fsdp_plugin, self.deepspeed_plugin = select_engine(
            fsdp_plugin, deepspeed_plugin, env, self.state, self._mixed_precision, ddp, self.gradient_state)
        self._float8 = float8_training(self._mixed_precision, kwargs_handlers, env.fp8, self._engine.name, self.device)
        self.scaler = self._engine.grad_scaler(scaler)
        self.step = 0
        self._trigger = False
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[PreparedDataLoader] = []
        self._custom_objects: list[Any] = []
        self._trackers = open_trackers(log_with, self.project_configuration.logging_dir, self.state, log_system_metrics)
        report_engine(self)  # the dashboard header names the engine that runs

    def __repr__(self) -> str:
        return f"Accelerator({self.state!r}, mixed_precision={self.mixed_precision!r})"

    # ---- properties (the process ones come from ProcessFacade) ------------------------------------------------
    @property
    def mixed_precision(self) -> MixedPrecision:
        """``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``."""
        return self._mixed_precision

    @property
    def sync_gradients(self) -> bool:
        """True when this batch syncs gradients and the optimizer really steps."""
        return self.gradient_state.sync_gradients

    @property
    def trackers(self) -> list[Any]:
        """The trackers receiving :meth:`log` values now."""
        return self._trackers.trackers

    @property
    def engine(self) -> Engine:
        """How models are distributed: the engine every engine-specific step is delegated to
        (``engine.name`` is ``"DDP"``, ``"FSDP"`` or ``"DEEPSPEED"``)."""
        return self._engine

    # ---- prepare --------------------------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, DataLoaders and schedulers, in any order; others pass through.

        Returns the prepared objects in the order given (one object for one argument). Schedulers are wrapped
        after the optimizers so they see the prepared ones; preparing an object twice does not wrap it twice.
        """
        places = device_placement if device_placement is not None else [self.device_placement] * len(args)
        if len(places) != len(args):
            raise ConfigurationError(f"prepare: device_placement has {len(places)} entries for {len(args)} objects")
        first = [self._prepare_one(obj, place) for obj, place in zip(args, places, strict=True)]
        first = self._finish(first)
        result = [self._prepare_scheduler(obj) if isinstance(obj, _SCHEDULERS) else obj for obj in first]
        return result[0] if len(result) == 1 else tuple(result)

    def _prepare_one(self, obj: Any, place: bool) -> Any:
        """Prepare one non-scheduler object (schedulers come in a second pass); models and optimizers are
        recorded once the engine has finished them (:meth:`_finish`)."""
        obj = self._float8.adopt(obj) if self._float8 else obj  # fp8: convert models, keep optimizers on new weights
        if isinstance(obj, torch.nn.Module):
            return self._engine.prepare_model(obj, place)
        if isinstance(obj, torch.optim.Optimizer) and not isinstance(obj, AcceleratedOptimizer):
            return self._engine.prepare_optimizer(obj, self.gradient_state, self.scaler)
        if isinstance(obj, torch.utils.data.DataLoader):
            return self.prepare_data_loader(obj, device_placement=place)
        return obj

    def _finish(self, objects: list[Any]) -> list[Any]:
        """Let the engine finish one ``prepare`` call's objects, then record the models and optimizers."""
        done = self._engine.finish_prepare(objects, self._dataloaders)
        record_prepared(done, self._models, self._optimizers)
        return done

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None) -> torch.nn.Module:
        """Device, mixed-precision forward and the engine's wrapper (DDP, FSDP, DeepSpeed) for one model."""
        place = self.device_placement if device_placement is None else device_placement
        return cast(torch.nn.Module, self._finish([self._prepare_one(model, place)])[0])

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
        """Wrap one optimizer for accumulation and fp16 (an already wrapped one is returned as is)."""
        return cast(AcceleratedOptimizer, self._finish([self._prepare_one(optimizer, True)])[0])

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader, device_placement: bool | None = None,
                            slice_fn_for_dispatch: Any = None) -> PreparedDataLoader:
        """Shard one DataLoader across processes (see :func:`notebook_accel.data.prepare_data_loader`).

        Raises:
            DataPrepareError: ``slice_fn_for_dispatch`` is given (each process reads its own share here).
        """
        refuse_dispatch_slicing(slice_fn_for_dispatch)
        place = self.device_placement if device_placement is None else device_placement
        prepared = mark_dispatching(prepare_data_loader(data_loader, self.state, self.gradient_state,
                                                        self.dataloader_config, place),
                                    self.dataloader_config.dispatch_batches)
        record_loader(prepared, self._dataloaders, self)
        return prepared

    def _models_training(self) -> bool | None:
        """Whether a prepared model is in training mode (``None`` without one): names a loader train or eval."""
        return models_training(self._models)

    def _prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap one scheduler with the prepared optimizers it drives."""
        wrapped = AcceleratedScheduler(scheduler, scheduler_optimizers(scheduler, self._optimizers),
                                       self.gradient_state, self.step_scheduler_with_optimizer, self.split_batches,
                                       self.num_processes)
        self._schedulers.append(wrapped)
        return wrapped

    prepare_scheduler = _prepare_scheduler

    # ---- training step --------------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation steps and scaled under fp16 (under DeepSpeed, its
        ``engine.backward`` and, on the batch that syncs gradients, ``engine.step``)."""
        step_clock = steps.clock()
        started = step_clock.backward_begins(loss) if step_clock is not None else 0.0
        self._engine.backward(loss, self.gradient_state, self.scaler, **kwargs)
        if step_clock is not None:
            step_clock.backward(time.perf_counter() - started)

    def _do_sync(self) -> None:
        """Advance the accumulation counter and decide whether this batch syncs."""
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            state.sync_gradients = True
        else:
            self.step += 1
            state.sync_gradients = self.step % state.num_steps == 0

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """One batch of gradient accumulation: syncs every ``num_steps`` batches and on a loader's last batch."""
        self._do_sync()
        skip_sync = not self.sync_gradients and not self.gradient_state.sync_each_batch
        with contextlib.ExitStack() as stack:
            for model in models:
                if skip_sync:
                    stack.enter_context(self._engine.no_sync(model))
            yield

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync()`` (gradients are not all-reduced in the body); a no-op for one process and under
        DeepSpeed (which decides on its own when to reduce)."""
        return self._engine.no_sync(model)

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Autocast for this Accelerator's mixed precision (a no-op for ``"no"``); a handler with
        ``enabled=False`` (accelerate's ``AutocastKwargs``) turns it off for the block."""
        if autocast_handler is not None and getattr(autocast_handler, "enabled", True) is False:
            return contextlib.nullcontext()
        return autocast_context(self._mixed_precision, self.device, getattr(autocast_handler, "cache_enabled", None))

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0,
                        ) -> torch.Tensor | None:
        """Unscale, then clip; returns the total norm (over every shard under FSDP). Under DeepSpeed the engine
        clips inside its step to ``gradient_clipping``; this returns the norm of its last step (see the README)."""
        parameters, max_norm, norm_type = checked_clip_arguments(parameters, max_norm, norm_type)
        self.unscale_gradients()
        return self._engine.clip_grad_norm_(parameters, max_norm, norm_type)

    # ---- collectives ----------------------------------------------------------------------------------------
    def gather(self, tensor: Any) -> Any:
        """All-gather (nested) tensors, concatenated on dim 0 (see :func:`notebook_accel.ops.gather`)."""
        return ops.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather, then drop the repeats ``even_batches`` padded into a loader's last batch (into each DataLoader
        worker's last batch, for an iterable dataset read by workers).

        For a loader without automatic batching (``batch_size=None``) each process's data of the last step is
        kept or dropped whole: the first ``remainder`` processes' shares are real.
        """
        return gather_for_metrics(input_data, use_gather_object, self.gradient_state.active_loaders,
                                  self.num_processes)

    def gather_object(self, object: Any) -> list[Any]:  # noqa: A002 - accelerate's parameter name
        """Gather picklable objects from every process (see :func:`notebook_accel.ops.gather_object`)."""
        return ops.gather_object(object)

    def reduce(self, tensor: Any, reduction: ops.Reduction = "sum", scale: float = 1.0) -> Any:
        """All-reduce (nested) tensors: ``"sum"`` (default), ``"mean"`` or ``"max"``."""
        return ops.reduce(tensor, reduction, scale)

    def broadcast(self, tensor: Any, from_process: int = 0) -> Any:
        """Every process gets ``from_process``'s tensors."""
        return ops.broadcast(tensor, from_process)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        """Pad (nested) tensors along ``dim`` to the largest size across processes."""
        return ops.pad_across_processes(tensor, dim, pad_index, pad_first)

    # ---- models, saving, misc -------------------------------------------------------------------------------
    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's module inside the DDP wrapper (inside ``torch.compile``'s too with
        ``keep_torch_compile=False``; with ``True``, a compiled module is returned compiled)."""
        return user_module(self._engine, model, keep_fp32_wrapper, keep_torch_compile)

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The unwrapped model's ``state_dict()`` (without DDP's ``module.`` prefixes).

        Under FSDP and DeepSpeed ZeRO-3 the full weights are gathered on CPU (a collective: call it on every rank);
        rank 0 gets them, the other ranks an empty dict.
        """
        return self._engine.full_state_dict(model)

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike[str],
                   max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> str:
        """Write the unwrapped model's weights to ``save_directory`` (main process): ``model.safetensors``, or
        shards with an index above ``max_shard_size``; ``pytorch_model.bin`` with ``safe_serialization=False``."""
        from notebook_accel import checkpointing

        return checkpointing.save_model(self, model, save_directory, max_shard_size, safe_serialization)

    def save_state(self, output_dir: str | None = None, *, async_save: bool | None = None, **kwargs: Any) -> str:
        """Save models, optimizers, schedulers, loaders, scaler, RNGs and registered objects; returns the path.
        ``async_save`` (default: ``project_configuration.async_save``): snapshot, return, write in the background."""
        self._run_save_hooks(output_dir)
        return save_checkpoint(self, output_dir, async_save)

    def load_state(self, input_dir: str | None = None, *, allow_world_size_change: bool = False,
                   **kwargs: Any) -> str:
        """Restore everything :meth:`save_state` wrote (loaders continue mid-epoch).

        In a run restarted by ``notebook_launcher(max_restarts=...)``, ``load_state()`` without a folder loads
        the checkpoint the failed attempt saved last (:attr:`resume_from`). A checkpoint of another number of
        processes needs ``allow_world_size_change=True`` (no RNG streams, no loader positions; see
        :func:`notebook_accel.checkpointing.load_state`).
        """
        from notebook_accel import checkpointing

        self.wait_for_checkpoint()  # a background save in flight is committed (or its failure raised) first
        source = input_dir if input_dir is not None else self.resume_from
        self._run_load_hooks(source)
        return checkpointing.load_state(self, source, allow_world_size_change=allow_world_size_change)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Include ``objects`` (with ``state_dict``/``load_state_dict``) in :meth:`save_state`."""
        from notebook_accel import checkpointing

        for obj in objects:
            checkpointing.check_registrable(obj)
        self._custom_objects.extend(objects)

    # ---- tracking -------------------------------------------------------------------------------------------
    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, Any] | None = None) -> None:
        """Start the trackers of ``log_with`` (main process) and store ``config``."""
        self._trackers.start(project_name, config, init_kwargs or {})

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> None:
        """Log scalars to the trackers and the live dashboard."""
        checked_log_arguments(values, step)
        self._trackers.log(values, step, checked_log_kwargs(log_kwargs, "log(log_kwargs=...)"))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (its underlying object with ``unwrap=True``)."""
        return self._trackers.get(name, unwrap)

    def end_training(self) -> None:
        """Finish every tracker and the background save in flight, then wait for every process."""
        self.wait_for_checkpoint()
        self._trackers.finish()
        self.wait_for_everyone()

