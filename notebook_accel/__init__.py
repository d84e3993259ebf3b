"""notebook-accel: Jupyter-first distributed training for PyTorch.

One cell forks a worker per device from the live kernel (:func:`notebook_launcher`), each runs your training
function under torch.distributed with an accelerate-compatible :class:`Accelerator`, and a dashboard under the
cell shows the run. ``from accelerate import Accelerator`` becomes ``from notebook_accel import Accelerator``.

Public names are loaded on first use, so ``import notebook_accel`` is cheap, touches no CUDA and loads no UI
code (ipywidgets, IPython.display and matplotlib stay out of the worker processes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from notebook_accel._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "notebook_launcher": "notebook_accel.launcher",
    "debug_launcher": "notebook_accel.launcher.debug",
    "WorkerError": "notebook_accel.launcher",
    "LaunchTimeoutError": "notebook_accel.launcher",
    "Accelerator": "notebook_accel.accelerator",
    "DistributedType": "notebook_accel.state",
    "PartialState": "notebook_accel.state",
    "AcceleratorState": "notebook_accel.state",
    "GradientState": "notebook_accel.gradient_state",
    "prepare_data_loader": "notebook_accel.data.standalone_prepare",
    "DataLoaderDispatcher": "notebook_accel.data.standalone_prepare",
    "SeedableRandomSampler": "notebook_accel.data.randomness",
    "is_rich_available": "notebook_accel.utils.availability",
    "ProfileKwargs": "notebook_accel.kwargs_handlers",
    "AutocastKwargs": "notebook_accel.kwargs_handlers",
    "init_empty_weights": "notebook_accel.empty_weights",
    "init_on_device": "notebook_accel.empty_weights",
    "synchronize_rng_states": "notebook_accel.utils.random",
    "find_executable_batch_size": "notebook_accel.memory",
    "release_memory": "notebook_accel.memory",
    "held_memory": "notebook_accel.memory",
    "HeldMemory": "notebook_accel.memory",
    "load_checkpoint_in_model": "notebook_accel.checkpointing.weights",
    "DataLoaderConfiguration": "notebook_accel.plugins",
    "ProjectConfiguration": "notebook_accel.plugins",
    "GradientAccumulationPlugin": "notebook_accel.plugins",
    "DistributedDataParallelKwargs": "notebook_accel.kwargs_handlers",
    "DDPCommunicationHookType": "notebook_accel.kwargs_handlers",
    "GradScalerKwargs": "notebook_accel.kwargs_handlers",
    "AORecipeKwargs": "notebook_accel.kwargs_handlers",
    "InitProcessGroupKwargs": "notebook_accel.kwargs_handlers",
    "FullyShardedDataParallelPlugin": "notebook_accel.engines.fsdp.plugin",
    "DeepSpeedPlugin": "notebook_accel.engines.deepspeed.plugin",
    "DummyOptim": "notebook_accel.engines.deepspeed.dummy",
    "DummyScheduler": "notebook_accel.engines.deepspeed.dummy",
    "LocalSGD": "notebook_accel.local_sgd",
    "get_logger": "notebook_accel.logging",
    "get_verbosity": "notebook_accel.logging",
    "set_verbosity": "notebook_accel.logging",
    "set_verbosity_debug": "notebook_accel.logging",
    "set_verbosity_info": "notebook_accel.logging",
    "set_verbosity_warning": "notebook_accel.logging",
    "set_verbosity_error": "notebook_accel.logging",
    "set_seed": "notebook_accel.utils",
    "skip_first_batches": "notebook_accel.data",
    "Config": "notebook_accel.config",
    "ConfigError": "notebook_accel.config",
    "load_config": "notebook_accel.config",
    "CheckpointError": "notebook_accel.checkpointing",
    "progress": "notebook_accel.progress",
    "NotebookAccelError": "notebook_accel.errors",
    "LaunchError": "notebook_accel.errors",
    "CudaInitializedError": "notebook_accel.errors",
    "RayCluster": "notebook_accel.cluster",
    "SlurmCluster": "notebook_accel.cluster.slurm",
    "ray_leftovers": "notebook_accel.launcher.placement.ray.leftovers",
    "release_ray_workers": "notebook_accel.launcher.placement.ray.warm",
    "release_slurm_steps": "notebook_accel.launcher.placement.slurm.warm",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from notebook_accel.accelerator import Accelerator
    from notebook_accel.checkpointing import CheckpointError
    from notebook_accel.checkpointing.weights import load_checkpoint_in_model
    from notebook_accel.cluster import RayCluster
    from notebook_accel.cluster.slurm import SlurmCluster
    from notebook_accel.config import Config, ConfigError, load_config
    from notebook_accel.data import skip_first_batches
    from notebook_accel.data.randomness import SeedableRandomSampler
    from notebook_accel.data.standalone_prepare import DataLoaderDispatcher, prepare_data_loader
    from notebook_accel.empty_weights import init_empty_weights, init_on_device
    from notebook_accel.engines.deepspeed.dummy import DummyOptim, DummyScheduler
    from notebook_accel.engines.deepspeed.plugin import DeepSpeedPlugin
    from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin
    from notebook_accel.errors import CudaInitializedError, LaunchError, NotebookAccelError
    from notebook_accel.gradient_state import GradientState
    from notebook_accel.kwargs_handlers import (
        AORecipeKwargs,
        AutocastKwargs,
        DDPCommunicationHookType,
        DistributedDataParallelKwargs,
        GradScalerKwargs,
        InitProcessGroupKwargs,
        ProfileKwargs,
    )
    from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
    from notebook_accel.launcher.debug import debug_launcher
    from notebook_accel.launcher.placement.ray.leftovers import ray_leftovers
    from notebook_accel.launcher.placement.ray.warm import release_ray_workers
    from notebook_accel.launcher.placement.slurm.warm import release_slurm_steps
    from notebook_accel.local_sgd import LocalSGD
    from notebook_accel.logging import (
        get_logger,
        get_verbosity,
        set_verbosity,
        set_verbosity_debug,
        set_verbosity_error,
        set_verbosity_info,
        set_verbosity_warning,
    )
    from notebook_accel.memory import HeldMemory, find_executable_batch_size, held_memory, release_memory
    from notebook_accel.plugins import DataLoaderConfiguration, GradientAccumulationPlugin, ProjectConfiguration
    from notebook_accel.progress import progress
    from notebook_accel.state import AcceleratorState, DistributedType, PartialState
    from notebook_accel.utils import set_seed
    from notebook_accel.utils.availability import is_rich_available
    from notebook_accel.utils.random import synchronize_rng_states
