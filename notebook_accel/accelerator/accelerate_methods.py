"""Accelerator methods accelerate 1.x has that are thin over the rest: state hooks, uneven inputs, local-process
decorators, a forced gradient sync, the trigger, gradient unscaling and value clipping, ``save``, memory and seeds,
the profiler, and the read-only settings. Mixed into :class:`~notebook_accel.Accelerator`, whose facade keeps the
verbs that carry the training loop (prepare, backward, accumulate, collectives, checkpoints, tracking)."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch.utils.hooks import RemovableHandle

from notebook_accel.accelerator.collectives import any_process_flagged
from notebook_accel.accelerator.saving import save_on_main
from notebook_accel.data import skip_first_batches
from notebook_accel.errors import shown
from notebook_accel.gradient_state import GradientState
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.plugins import ConfigurationError, DataLoaderConfiguration, ProjectConfiguration
from notebook_accel.state import ProcessHelperError, ProcessState
from notebook_accel.utils.random import set_seed as _set_seed

__all__ = ["AccelerateMethods"]

T = TypeVar("T")


def _loader_samplers(loaders: list[Any]) -> list[Any]:
    """The sharding samplers of prepared loaders that have an ``even_batches`` switch."""
    out = []
    for loader in loaders:
        for owner in (loader, getattr(loader, "loader", None), getattr(loader, "base_loader", None)):
            sampler = getattr(owner, "batch_sampler", None)
            if sampler is not None and hasattr(sampler, "even_batches"):
                out.append(sampler)
                break
    return out


class AccelerateMethods:
    """The methods; the Accelerator provides the attributes declared here."""

    state: ProcessState
    dataloader_config: DataLoaderConfiguration
    project_configuration: ProjectConfiguration
    gradient_state: GradientState
    scaler: Any  # the engine's GradScaler, or None
    step: int
    _trigger: bool
    _models: list[torch.nn.Module]
    _optimizers: list[AcceleratedOptimizer]
    _schedulers: list[Any]
    _dataloaders: list[Any]

    # -- state hooks --------------------------------------------------------------------------------------
    def _hooks(self, kind: str) -> OrderedDict[int, Callable[..., Any]]:
        """The hooks of ``kind`` by handle id (an OrderedDict: RemovableHandle keeps a weak reference to it)."""
        table: dict[str, OrderedDict[int, Callable[..., Any]]] = self.__dict__.setdefault("_state_hooks", {})
        return table.setdefault(kind, OrderedDict())

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` at the start of every :meth:`save_state` (all ranks).

        ``models`` are the prepared models, ``weights`` their state dicts (to inspect, e.g. to save a config
        file next to the checkpoint). Unlike accelerate, removing entries from ``weights`` does not drop a model
        from the checkpoint: it always holds every prepared model, so that resuming is exact.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        return self._register("save", hook)

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` at the start of every :meth:`load_state` (all ranks).

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        return self._register("load", hook)

    def _register(self, kind: str, hook: Callable[..., None]) -> RemovableHandle:
        """Add ``hook`` to the ``kind`` hooks; its handle removes it."""
        if not callable(hook):
            raise TypeError(f"a state hook must be callable, got {type(hook).__name__}")
        hooks = self._hooks(kind)
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def wait_for_checkpoint(self) -> str | None:
        """Wait until the checkpoint that ``save_state(async_save=True)`` is writing in the background is committed.

        Returns:
            Its path, or ``None`` when no save was in flight.

        Raises:
            CheckpointError: the background save failed (every rank raises it); the message names the checkpoint,
                and the previous checkpoint is still the latest complete one.

        Example:
            >>> accelerator.save_state(async_save=True)   # doctest: +SKIP
            >>> accelerator.wait_for_checkpoint()          # doctest: +SKIP
        """
        from notebook_accel.checkpointing.background import wait_for_checkpoint

        return wait_for_checkpoint()

    def _run_save_hooks(self, output_dir: str | None) -> None:
        hooks = list(self._hooks("save").values())
        if hooks:
            weights = [model.state_dict() for model in self._models]
            for hook in hooks:
                hook(list(self._models), weights, output_dir)

    def _run_load_hooks(self, input_dir: str | None) -> None:
        for hook in list(self._hooks("load").values()):
            hook(list(self._models), input_dir)

    # -- processes ----------------------------------------------------------------------------------------
    def on_local_process(self, function: Callable[..., T] | None = None,
                         local_process_index: int | None = None) -> Any:
        """Decorator: run ``function`` only on the process with this local index (others get ``None``)."""
        if local_process_index is None:
            raise ProcessHelperError(
                "on_local_process needs local_process_index=, "
                "e.g. @accelerator.on_local_process(local_process_index=1)")
        if function is None:
            return lambda fn: self.on_local_process(fn, local_process_index)
        run = self.state.local_process_index == local_process_index

        def wrapper(*args: Any, **kwargs: Any) -> T | None:
            return function(*args, **kwargs) if run else None

        return wrapper

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Let ranks with fewer batches finish while the others go on (``torch.distributed.algorithms.Join``).

        Args:
            joinables: the DDP models (and ``ZeroRedundancyOptimizer``) taking part.
            even_batches: set the prepared loaders' ``even_batches`` for the block (``False`` to give each rank
                only its own batches), restored after it.
        """
        samplers = _loader_samplers(self._dataloaders) if even_batches is not None else []
        if len(samplers) < len(self._dataloaders) and even_batches is not None and self.state.num_processes > 1:
            warnings.warn("join_uneven_inputs: overriding even_batches is only supported for map-style datasets, "
                          "yet some dataloaders given were iterable; those keep the even_batches they were "
                          "prepared with", stacklevel=3)
        saved = [sampler.even_batches for sampler in samplers]
        for sampler in samplers:
            sampler.even_batches = even_batches
        try:
            if self.state.num_processes > 1 and all(
                    isinstance(j, torch.distributed.algorithms.Joinable) for j in joinables):
                with torch.distributed.algorithms.Join(joinables):
                    yield
            else:
                if self.state.num_processes > 1:
                    warnings.warn("join_uneven_inputs is only supported for multi-GPU or multi-CPU DDP training: "
                                  "some joinables are not torch Joinables (a DDP model is), so the block runs "
                                  "without Join and has no effect", stacklevel=3)
                yield
        finally:
            for sampler, value in zip(samplers, saved):
                sampler.even_batches = value

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Make the next backward of a DDP ``model`` all-reduce even inside ``no_sync``/``accumulate``."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            return contextlib.nullcontext()

        @contextlib.contextmanager
        def forced() -> Iterator[None]:
            previous = model.require_backward_grad_sync
            model.require_forward_param_sync = True
            model.require_backward_grad_sync = True
            model.reducer.prepare_for_backward([])
            try:
                yield
            finally:
                model.require_backward_grad_sync = previous

        return forced()

    # -- gradients ----------------------------------------------------------------------------------------
    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients in place (on syncing batches; nothing without fp16)."""
        if self.scaler is None or not self.gradient_state.sync_gradients:
            return
        targets = self._optimizers if optimizer is None else (optimizer if isinstance(optimizer, list) else [optimizer])
        for opt in targets:
            self.scaler.unscale_(getattr(opt, "optimizer", opt))

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        """Unscale, then ``torch.nn.utils.clip_grad_value_``."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # -- the trigger, saving one object, memory and seeds ----------------------------------------------------
    def set_trigger(self) -> None:
        """Raise a flag on this process that :meth:`check_trigger` sees on every process (e.g. early stopping)."""
        self._trigger = True

    def check_trigger(self) -> bool:
        """True on every process when any process called :meth:`set_trigger` since the last check (collective)."""
        flag, self._trigger = self._trigger, False
        return any_process_flagged(flag, self.state.device)

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save(obj, f)`` on the main process only; ``safe_serialization=True`` writes a dict of tensors
        with safetensors instead."""
        save_on_main(obj, f, safe_serialization, self.state.is_main_process)

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget every prepared object, collect garbage, empty the CUDA cache; returns ``None`` per argument."""
        for prepared in (self._models, self._optimizers, self._schedulers, self._dataloaders):
            prepared.clear()
        self.step = 0
        gc.collect()
        if self.state.device.type == "cuda":
            torch.cuda.empty_cache()
        return [None] * len(objects)

    release_memory = free_memory

    def set_seed(self, seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
        """Seed every RNG (``device_specific`` adds this process's rank)."""
        _set_seed(seed + (self.state.process_index if device_specific else 0), deterministic=deterministic)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader that leaves out the first ``num_batches`` batches (resume inside an epoch)."""
        return skip_first_batches(dataloader, num_batches)

    # -- profiling and naming ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def profile(self, profile_handler: Any = None) -> Iterator[Any]:
        """Profile the block with ``torch.profiler`` (``ProfileKwargs`` from the argument or ``kwargs_handlers``);
        yields the profiler. With ``output_trace_dir`` each process writes ``profile_<rank>.json`` there, then
        every process waits for the others."""
        from notebook_accel.profiling import profile_context

        handler = profile_handler if profile_handler is not None else self.__dict__.get("_profile_handler")
        with profile_context(handler, self.state.device, self.state.process_index) as profiler:
            yield profiler
        if handler is not None and handler.output_trace_dir:
            self.state.wait_for_everyone()  # as accelerate: every rank's trace is written when any rank goes on

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named checkpoint gets (``checkpoint_<n>``)."""
        return int(getattr(self.project_configuration, "iteration", 0) or 0)

    # -- read-only settings accelerate exposes -------------------------------------------------------------
    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step; settable, as in accelerate (``accelerator.gradient_accumulation_steps = 4``
        makes :meth:`accumulate` sync every 4th batch from the next one on, e.g. after
        ``find_executable_batch_size`` halved the batch)."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"accelerator.gradient_accumulation_steps = {shown(steps)}: expected a whole "
                                     "number >= 1 (batches per optimizer step), e.g. "
                                     "accelerator.gradient_accumulation_steps = 4")
        self.gradient_state.num_steps = steps

    @property
    def fp8_backend(self) -> str:
        """``"AO"`` (torchao's float8, the only fp8 here) with ``mixed_precision="fp8"``, else ``"NO"`` (accelerate's
        ``FP8BackendType`` values)."""
        return "AO" if self.__dict__.get("_mixed_precision") == "fp8" else "NO"

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the fp16 scaler skipped the last optimizer step of any prepared optimizer."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    @property
    def split_batches(self) -> bool:
        """Prepared loaders slice each batch across processes."""
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        """Prepared loaders pad the last round so every process runs the same number of batches."""
        return self.dataloader_config.even_batches

    @property
    def project_dir(self) -> str | None:
        """Folder for checkpoints."""
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        """Folder for tracker logs."""
        return self.project_configuration.logging_dir

    @property
    def non_blocking(self) -> bool:
        """``dataloader_config.non_blocking``: batches are moved to the device with ``non_blocking=True``."""
        return bool(self.dataloader_config.non_blocking)

    @property
    def use_seedable_sampler(self) -> bool:
        """``dataloader_config.use_seedable_sampler``: a plain shuffle is a pure function of (seed, epoch)."""
        return bool(self.dataloader_config.use_seedable_sampler)

    @property
    def dispatch_batches(self) -> bool | None:
        """``dataloader_config.dispatch_batches`` (any value: each process reads its own share)."""
        return self.dataloader_config.dispatch_batches

    @property
    def use_stateful_dataloader(self) -> bool:
        """``True``: every prepared loader has ``state_dict()``/``load_state_dict()`` and resumes mid-epoch, as
        accelerate's stateful loaders do (there is no switch to turn this off)."""
        return True

    @property
    def multi_device(self) -> bool:
        """Whether this run spreads over several GPUs with DDP (accelerate's ``MULTI_GPU``; ``False`` on CPU and
        with FSDP, as there)."""
        return self.state.distributed_type.value == "MULTI_GPU"

    @property
    def is_fsdp2(self) -> bool:
        """Whether models are sharded with FSDP; it is always torch's ``fully_shard`` (FSDP2) here."""
        return self.state.distributed_type.value == "FSDP"

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """accelerate's name for :attr:`is_fsdp2` when no other parallelism is configured (none can be here)."""
        return self.is_fsdp2

    @property
    def should_save_model(self) -> bool:
        """``True`` on every process: ``save_model`` is called by all of them (rank 0 writes the files)."""
        return True
