"""What an :class:`~notebook_accel.Accelerator` does under DeepSpeed ZeRO, in one engine it delegates to.

``prepare`` hands the model and its torch optimizer to ``deepspeed.initialize`` together (so they must be passed
to the same ``prepare`` call, as in accelerate), after the config's ``"auto"`` values are filled (:mod:`.auto`).
A ``DummyOptim``/``DummyScheduler`` (:mod:`.dummy`) in that call stands for the config's ``optimizer``/``scheduler``
section: DeepSpeed builds them, and ``prepare`` returns them in the dummies' places.
Then, as in accelerate, DeepSpeed does the accumulation, clipping and the optimizer step itself:
``accelerator.backward(loss)`` is ``engine.backward(loss)`` followed, on the batch that syncs gradients, by
``engine.step()``; the prepared optimizer's ``step``/``zero_grad`` do nothing. ``clip_grad_norm_`` cannot clip
(DeepSpeed clips inside its step to ``gradient_clipping``) and returns the norm DeepSpeed measured at its last step.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from notebook_accel.engines.ddp import DDPEngine
from notebook_accel.engines.deepspeed.auto import fill_auto
from notebook_accel.engines.deepspeed.collectives import time_deepspeed_collectives
from notebook_accel.engines.deepspeed.dummy import DeepSpeedScheduler, DummyOptim, DummyScheduler, fill_from_dummies
from notebook_accel.engines.deepspeed.jit_ops import compiling_phase
from notebook_accel.engines.deepspeed.plugin import DeepSpeedPlugin
from notebook_accel.engines.protocol import EngineParts
from notebook_accel.environment import LaunchEnvironment, ensure_local_rank
from notebook_accel.monitor import steps
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.plugins import ConfigurationError
from notebook_accel.precision import MixedPrecision, wrap_forward
from notebook_accel.state import GradientState, ProcessState, destroy_at_exit

if TYPE_CHECKING:
    from notebook_accel.checkpointing.saved import CheckpointContext, Saved
    from notebook_accel.data import PreparedDataLoader

__all__ = ["DeepSpeedEngine", "DeepSpeedOptimizer", "build", "resolve_deepspeed_plugin", "import_deepspeed"]

INSTALL_HINT = "pip install notebook-accel[deepspeed]"


def import_deepspeed() -> Any:
    """The ``deepspeed`` module.

    Raises:
        ImportError: it is not installed (the message names the extra to install).
    """
    try:
        import deepspeed
    except ImportError as e:
        raise ImportError(f"DeepSpeed training needs the deepspeed package, which is not installed ({e}); install it "
                          f"with `{INSTALL_HINT}` and restart the Python kernel") from e
    return deepspeed


def resolve_deepspeed_plugin(plugin: Any, env: LaunchEnvironment) -> DeepSpeedPlugin:
    """``Accelerator(deepspeed_plugin=)``, else the launch config's settings (``NOTEBOOK_ACCEL_DEEPSPEED``).

    Raises:
        ConfigurationError: ``plugin`` is not a :class:`DeepSpeedPlugin`.
    """
    options = env.engine_options(DeepSpeedEngine.name)
    if plugin is None and options:
        return DeepSpeedPlugin.from_json(options)
    if not isinstance(plugin, DeepSpeedPlugin):
        raise ConfigurationError(f"deepspeed_plugin: expected a DeepSpeedPlugin, got {type(plugin).__name__}; build "
                                 "one with DeepSpeedPlugin(zero_stage=2, ...)")
    return plugin


class DeepSpeedOptimizer(AcceleratedOptimizer):
    """The prepared optimizer under DeepSpeed: the engine steps it inside ``accelerator.backward``, so ``step``
    and ``zero_grad`` do nothing; ``param_groups`` (what schedulers change) are the torch optimizer's, which
    DeepSpeed's ZeRO optimizer steps with."""

    engine: Any = None

    def step(self, closure: Any = None) -> Any:  # noqa: ARG002 - accelerate's signature
        """Nothing: DeepSpeed stepped in ``accelerator.backward`` on the batch that synced gradients."""
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: DeepSpeed clears its gradients after its step."""

    @property
    def step_was_skipped(self) -> bool:
        """True when DeepSpeed's fp16 loss scaler skipped the last step (inf/nan gradients)."""
        return self.engine is not None and not self.engine.was_step_applied() and self.gradient_state.sync_gradients


class DeepSpeedEngine(DDPEngine):
    """Initialises DeepSpeed for the prepared model and optimizer, and runs its backward and step.

    Args:
        plugin: the DeepSpeed options.
        state: this process's state.
        mixed_precision: the Accelerator's precision (fills ``bf16``/``fp16`` ``"auto"``).
        gradient_state: the Accelerator's accumulation state; a DeepSpeed config that sets
            ``gradient_accumulation_steps`` overrides its step count.

    Raises:
        ImportError: deepspeed is not installed.
    """

    name = "DEEPSPEED"

    def __init__(self, plugin: DeepSpeedPlugin, state: ProcessState, mixed_precision: MixedPrecision,
                 gradient_state: GradientState) -> None:
        super().__init__(state, mixed_precision)
        if mixed_precision == "fp16" and state.device.type == "cpu":
            raise ConfigurationError("DeepSpeed on CPU: mixed_precision='fp16' is refused by DeepSpeed ('Type fp16 is "
                                     "not supported on your device'); use 'bf16' or 'no' on CPU, or run on GPUs")
        self.deepspeed = import_deepspeed()
        self.plugin = plugin
        steps = plugin.deepspeed_config.get("gradient_accumulation_steps")
        if isinstance(steps, int) and not isinstance(steps, bool):
            gradient_state.num_steps = steps
        self.gradient_state = gradient_state
        self.wrapped: Any = None  # the deepspeed engine
        self._clip_noted = False

    def grad_scaler(self, handler: Any) -> Any:
        """``None``: DeepSpeed scales fp16 losses itself (its ``fp16`` config section)."""
        return None

    def prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        """The model, placed; DeepSpeed wraps it in :meth:`finish_prepare` together with its optimizer."""
        if self._is_wrapped(model):
            return model
        model = model.to(self.state.device) if device_placement else model
        wrap_forward(model, self.mixed_precision, self.state.device)  # float inputs meet DeepSpeed's bf16 weights
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, gradient_state: GradientState,
                          scaler: Any) -> AcceleratedOptimizer:
        """A :class:`DeepSpeedOptimizer`, bound to DeepSpeed's engine in :meth:`finish_prepare`."""
        return DeepSpeedOptimizer(optimizer, gradient_state, None)

    def _is_wrapped(self, model: Any) -> bool:
        return isinstance(model, self.deepspeed.DeepSpeedEngine)

    def finish_prepare(self, objects: list[Any], loaders: Sequence[PreparedDataLoader]) -> list[Any]:
        """Hand this call's model and optimizer to ``deepspeed.initialize``; returns the objects with the model
        replaced by DeepSpeed's engine.

        Raises:
            ConfigurationError: more than one model or optimizer, an optimizer without its model, a second
                model after the first was initialised, an optimizer both in the config and in the code, or a
                dummy without the config section it stands for.
            StaleBuildLockError: a stopped build left the lock of an op DeepSpeed compiles here
                (:mod:`.jit_ops`).
        """
        models = [o for o in objects if isinstance(o, torch.nn.Module) and not self._is_wrapped(o)]
        optimizers = [o for o in objects if isinstance(o, DeepSpeedOptimizer) and o.engine is None]
        dummies = [o for o in objects if isinstance(o, DummyOptim)]
        dummy = dummies[0] if dummies else None
        dummy_scheduler = next((o for o in objects if isinstance(o, DummyScheduler)), None)
        if not models:
            if optimizers or dummies or dummy_scheduler is not None:
                raise ConfigurationError("DeepSpeed: pass the model and its optimizer to the same "
                                         "accelerator.prepare(model, optimizer, ...) call; DeepSpeed wraps them together")
            return objects
        if len(models) > 1 or len(optimizers) + len(dummies) > 1 or self.wrapped is not None:
            raise ConfigurationError(f"DeepSpeed trains one model with one optimizer per Accelerator; got "
                                     f"{len(models)} model(s) and {len(optimizers) + len(dummies)} optimizer(s) in "
                                     "this prepare call"
                                     f"{' after one was prepared already' if self.wrapped is not None else ''}")
        config = self._config(loaders, dummy, dummy_scheduler)
        if "optimizer" in config and optimizers:
            raise ConfigurationError("DeepSpeed: the DeepSpeed config has an 'optimizer' section and a torch optimizer "
                                     "was passed to prepare; pass DummyOptim(model.parameters()) (from notebook_accel.utils) "
                                     "to train with the config's optimizer, or remove the 'optimizer' section to train "
                                     "with the torch optimizer")
        optimizer = optimizers[0].optimizer if optimizers else None
        if optimizer is not None:  # as accelerate: any torch optimizer (SGD too), not only DeepSpeed's tested ones
            config["zero_allow_untested_optimizer"] = True
        self._mark_moe_leaves(models[0])
        self._ensure_group()
        ensure_local_rank(self.state.local_process_index)  # DeepSpeed reads LOCAL_RANK, even in one process
        with compiling_phase(self.state.process_index):  # a first CPU run compiles DeepSpeed's comm op here
            engine, *_ = self.deepspeed.initialize(
                model=models[0], optimizer=optimizer, config=config, dist_init_required=False,
                lr_scheduler=dummy_scheduler.lr_scheduler_callable if dummy_scheduler is not None else None)
        self.wrapped = engine
        step_clock = steps.clock()
        if step_clock is not None:  # a launched worker: DeepSpeed's collectives are part of the step breakdown
            time_deepspeed_collectives(step_clock.comm_timer)
        built = {id(models[0]): engine}
        if dummy is not None:  # the optimizer (and scheduler) the config defines, built by DeepSpeed
            built[id(dummy)] = DeepSpeedOptimizer(engine.optimizer, self.gradient_state, None)
            optimizers = [built[id(dummy)]]
        if dummy_scheduler is not None:
            built[id(dummy_scheduler)] = DeepSpeedScheduler(engine.lr_scheduler)
        if optimizers:
            optimizers[0].engine = engine
        return [built.get(id(o), o) for o in objects]

    def _ensure_group(self) -> None:
        """DeepSpeed needs a process group even for one process: form a one-process group in memory then."""
        if not torch.distributed.is_initialized():
            backend = "nccl" if self.state.device.type == "cuda" else "gloo"
            torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
            destroy_at_exit(torch.distributed.group.WORLD)  # left to C++ exit, a gloo group aborts now and then

    def _mark_moe_leaves(self, model: torch.nn.Module) -> None:
        """Make the plugin's MoE layer classes ZeRO-3 leaf modules (their parameters are gathered as one).

        Raises:
            ConfigurationError: a class name that no submodule of ``model`` has.
        """
        names = self.plugin.transformer_moe_cls_names or []
        if not names or self.plugin.zero_stage != 3:
            return
        classes = {type(m).__name__: type(m) for m in model.modules()}
        missing = [n for n in names if n not in classes]
        if missing:
            raise ConfigurationError(f"DeepSpeedPlugin(transformer_moe_cls_names=): {missing} are not classes of "
                                     f"this model's modules; its classes: {', '.join(sorted(classes))}")
        self.deepspeed.utils.set_z3_leaf_modules(model, [classes[n] for n in names])

    def _config(self, loaders: Sequence[PreparedDataLoader], dummy: DummyOptim | None,
                dummy_scheduler: DummyScheduler | None) -> dict[str, Any]:
        """The plugin's config with its ``"auto"`` values filled from this Accelerator (and from the dummy
        optimizer and scheduler, in the config's sections they stand for)."""
        totals = [loader.total_batch_size for loader in loaders if loader.total_batch_size]
        batch = totals[0] // self.state.num_processes if totals else None  # the first loader is the training one
        sections = fill_from_dummies(self.plugin.deepspeed_config, dummy, dummy_scheduler, self.state.num_processes)
        config = fill_auto(sections, micro_batch=batch, accumulation=self.gradient_state.num_steps,
                           world_size=self.state.num_processes, clipping=self.plugin.gradient_clipping,
                           mixed_precision=self.mixed_precision)
        zero = config.get("zero_optimization") or {}
        offloaded = any((zero.get(k) or {}).get("device", "none") != "none" for k in ("offload_optimizer", "offload_param"))
        if offloaded:  # the torch optimizer steps on CPU (DeepSpeedCPUAdam needs a JIT-compiled C++ op)
            config.setdefault("zero_force_ds_cpu_optimizer", False)
        return config

    def backward(self, loss: torch.Tensor, gradient_state: GradientState, scaler: Any, **kwargs: Any) -> None:
        """``engine.backward(loss)`` (DeepSpeed divides by the accumulation steps), then ``engine.step()`` on the
        batch that syncs gradients."""
        engine = self._engine()
        engine.set_gradient_accumulation_boundary(gradient_state.sync_gradients)
        engine.backward(loss, **kwargs)
        if gradient_state.sync_gradients:
            engine.step()

    def _engine(self) -> Any:
        if self.wrapped is None:
            raise ConfigurationError("DeepSpeed: no model was prepared; call accelerator.prepare(model, optimizer, "
                                     "dataloader) before training")
        return self.wrapped

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """A no-op: DeepSpeed reduces gradients at the accumulation boundary :meth:`backward` sets."""
        return contextlib.nullcontext()

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float) -> torch.Tensor | None:
        """The total gradient norm DeepSpeed measured at its last step (``None`` before the first one).

        DeepSpeed clips inside its step, to the config's ``gradient_clipping``; a different ``max_norm`` here is
        not applied, and a warning says so once.
        """
        configured = self.wrapped.gradient_clipping() if self.wrapped is not None else None
        if not self._clip_noted and configured != max_norm:
            self._clip_noted = True
            warnings.warn(f"clip_grad_norm_(max_norm={max_norm}) under DeepSpeed: DeepSpeed clips inside its step to "
                          f"gradient_clipping={configured or 'off'}; set DeepSpeedPlugin(gradient_clipping="
                          f"{max_norm}) (or gradient_clipping in the DeepSpeed config) to clip at {max_norm}",
                          UserWarning, stacklevel=3)
        norm = self.wrapped.get_global_grad_norm() if self.wrapped is not None else None
        return None if norm is None else torch.as_tensor(float(norm))

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside DeepSpeed's engine."""
        return model.module if self._is_wrapped(model) else model  # type: ignore[return-value]

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights on CPU (collective); under ZeRO-3 gathered from every rank, the main process gets
        them and the others an empty dict."""
        from notebook_accel.engines.deepspeed.checkpoint import gathered_weights

        return gathered_weights(self.deepspeed, self.unwrap(model), self.state.is_main_process,
                                self.plugin.zero_stage == 3)

    def checkpoint_model(self, index: int, context: CheckpointContext) -> Saved | None:
        """DeepSpeed's own checkpoint of the engine (model and optimizer states) inside ours."""
        from notebook_accel.engines.deepspeed.checkpoint import engine_checkpoint

        model = context.prepared[index]
        return engine_checkpoint(model, index) if self._is_wrapped(model) else None

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer, index: int,
                             context: CheckpointContext) -> Saved | None:
        """The optimizer's part of DeepSpeed's checkpoint (written and loaded with the model's)."""
        from notebook_accel.engines.deepspeed.checkpoint import optimizer_checkpoint

        return optimizer_checkpoint(self.wrapped, optimizer, index) if self.wrapped is not None else None


def build(plugin: Any, env: LaunchEnvironment, parts: EngineParts) -> tuple[DeepSpeedEngine, DeepSpeedPlugin]:
    """The engine for ``Accelerator(deepspeed_plugin=plugin)`` or the launch config's DeepSpeed settings, and the
    plugin in use (any number of processes, as in accelerate).

    Raises:
        ConfigurationError: ``plugin`` is not a :class:`DeepSpeedPlugin`.
    """
    resolved = resolve_deepspeed_plugin(plugin, env)
    return DeepSpeedEngine(resolved, parts.state, parts.mixed_precision, parts.gradient_state), resolved
