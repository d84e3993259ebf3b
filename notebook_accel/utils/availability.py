"""accelerate's ``is_*_available`` predicates, answered truthfully for this library and this machine.

Code written for accelerate branches on them (``if is_hpu_available(): ...``), so each of accelerate's 55 names
exists here and can be called with accelerate's arguments. Three kinds of answer:

- a package: whether it can be imported (found on the path, never imported: checking ``is_wandb_available()``
  loads nothing);
- a device: whether this process can use one, asked without initialising CUDA (safe in a notebook kernel
  before the launcher forks);
- a feature this library does not provide (FP8, Megatron-LM, pipeline parallelism, LOMO, ...): always False,
  even with the package installed, because the code path it guards would not run here.

Example:
    >>> from notebook_accel.utils import is_hpu_available, is_pytest_available
    >>> is_hpu_available(), is_pytest_available()
    (False, True)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import itertools
from collections.abc import Callable

import torch

from notebook_accel.hardware import detect_gpus, supports_bf16

Predicate = Callable[[], bool]


def _found(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (a submodule imports its parent package)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _at_least(distribution: str, minimum: str | None) -> bool:
    """Whether ``distribution`` is installed at version ``minimum`` or newer (any version when None)."""
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return minimum is None or _release(installed) >= _release(minimum)


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"0.45.1.dev0"`` -> ``(0, 45, 1)``."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def _installed(name: str, *modules: str) -> Predicate:
    """A predicate named ``is_<name>_available``: True when one of ``modules`` can be imported."""

    def predicate() -> bool:
        return any(_found(m) for m in modules)

    predicate.__name__ = predicate.__qualname__ = f"is_{name}_available"
    predicate.__doc__ = f"Whether {' or '.join(f'``{m}``' for m in modules)} can be imported (it is not imported)."
    return predicate


def _not_here(name: str, reason: str) -> Callable[..., bool]:
    """A predicate named ``is_<name>_available`` that is always False: this library has no such code path."""

    def predicate(*args: object, **kwargs: object) -> bool:
        return False

    predicate.__name__ = predicate.__qualname__ = f"is_{name}_available"
    predicate.__doc__ = f"Always False: {reason}."
    return predicate


# ---- packages ------------------------------------------------------------------------------------------------
is_aim_available = _installed("aim", "aim")
is_amdsmi_available = _installed("amdsmi", "amdsmi")
is_boto3_available = _installed("boto3", "boto3")
is_clearml_available = _installed("clearml", "clearml")
is_comet_ml_available = _installed("comet_ml", "comet_ml")
is_datasets_available = _installed("datasets", "datasets")
is_deepspeed_available = _installed("deepspeed", "deepspeed")
is_dvclive_available = _installed("dvclive", "dvclive")
is_import_timer_available = _installed("import_timer", "import_timer")
is_matplotlib_available = _installed("matplotlib", "matplotlib")
is_mlflow_available = _installed("mlflow", "mlflow")
is_pandas_available = _installed("pandas", "pandas")
is_peft_available = _installed("peft", "peft")
is_pynvml_available = _installed("pynvml", "pynvml")
is_pytest_available = _installed("pytest", "pytest")
is_sagemaker_available = _installed("sagemaker", "sagemaker")
is_schedulefree_available = _installed("schedulefree", "schedulefree")
is_swanlab_available = _installed("swanlab", "swanlab")
is_tensorboard_available = _installed("tensorboard", "tensorboard", "tensorboardX")
is_timm_available = _installed("timm", "timm")
is_torchao_available = _installed("torchao", "torchao")
is_fp8_available = _installed("fp8", "torchao")  # mixed_precision="fp8" trains through torchao's float8 here
is_torchdata_available = _installed("torchdata", "torchdata")
is_torchvision_available = _installed("torchvision", "torchvision")
is_trackio_available = _installed("trackio", "trackio")
is_transformers_available = _installed("transformers", "transformers")
is_triton_available = _installed("triton", "triton")
is_wandb_available = _installed("wandb", "wandb")


def is_torchdata_stateful_dataloader_available() -> bool:
    """Whether torchdata's ``StatefulDataLoader`` can be imported (our prepared loaders are stateful anyway)."""
    return _found("torchdata") and _found("torchdata.stateful_dataloader")


def is_bnb_available(min_version: str | None = None) -> bool:
    """Whether bitsandbytes is installed (at ``min_version`` or newer when given)."""
    return _at_least("bitsandbytes", min_version)


def is_8bit_bnb_available() -> bool:
    """Whether the installed bitsandbytes has 8-bit optimizers and layers (0.37.2 or newer)."""
    return is_bnb_available("0.37.2")


def is_4bit_bnb_available() -> bool:
    """Whether the installed bitsandbytes has 4-bit layers (0.39.0 or newer)."""
    return is_bnb_available("0.39.0")


def is_bitsandbytes_multi_backend_available() -> bool:
    """Whether the installed bitsandbytes says it has its multi-backend (non-CUDA) support."""
    if not is_bnb_available():
        return False
    import bitsandbytes

    return "multi_backend" in getattr(bitsandbytes, "features", set())


def is_weights_only_available() -> bool:
    """Whether ``torch.load`` takes ``weights_only=`` (torch 1.13 and newer)."""
    return "weights_only" in inspect.signature(torch.load).parameters


# ---- devices -------------------------------------------------------------------------------------------------
def is_cuda_available() -> bool:
    """Whether this process can use a CUDA GPU; asked through NVML, so CUDA is not initialised (fork-safe)."""
    if torch.cuda.is_initialized():
        return torch.cuda.is_available()
    return torch.backends.cuda.is_built() and bool(detect_gpus())


def is_rocm_available() -> bool:
    """Whether this torch is a ROCm (HIP) build."""
    return torch.version.hip is not None


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS device is usable (``min_version`` of torch is accepted for compatibility)."""
    backend = getattr(torch.backends, "mps", None)
    return backend is not None and bool(backend.is_available())


def is_xpu_available(check_device: bool = False) -> bool:
    """Whether torch reports an Intel XPU (training on one is not supported here: CPU and CUDA only)."""
    xpu = getattr(torch, "xpu", None)
    return xpu is not None and bool(xpu.is_available())


def is_xccl_available() -> bool:
    """Whether this torch has the XCCL (Intel GPU) collective backend."""
    import torch.distributed as dist

    check = getattr(dist, "is_xccl_available", None)
    return bool(check()) if check is not None else False


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bf16 mixed precision runs: on CPU always, on CUDA with compute capability 8.0 or newer."""
    return supports_bf16(detect_gpus()) if is_cuda_available() else True


def is_fp16_available() -> bool:
    """Whether fp16 mixed precision can be chosen (True: on CPU it runs through autocast too)."""
    return True


_DEVICES_NOT_HERE = "this library trains on CPU and CUDA only"
is_hpu_available = _not_here("hpu", f"Intel Gaudi (HPU); {_DEVICES_NOT_HERE}")
is_npu_available = _not_here("npu", f"Ascend NPU; {_DEVICES_NOT_HERE}")
is_mlu_available = _not_here("mlu", f"Cambricon MLU; {_DEVICES_NOT_HERE}")
is_musa_available = _not_here("musa", f"Moore Threads MUSA; {_DEVICES_NOT_HERE}")
is_sdaa_available = _not_here("sdaa", f"Tecorigin SDAA; {_DEVICES_NOT_HERE}")
is_neuron_available = _not_here("neuron", f"AWS Neuron; {_DEVICES_NOT_HERE}")
is_torch_xla_available = _not_here("torch_xla", f"TPU/XLA; {_DEVICES_NOT_HERE}")

# ---- features this library does not provide ------------------------------------------------------------------
is_msamp_available = _not_here("msamp", "MS-AMP (FP8) is not supported")
is_transformer_engine_available = _not_here("transformer_engine", "Transformer Engine (FP8) is not supported")
is_transformer_engine_mxfp8_available = _not_here("transformer_engine_mxfp8",
                                                  "Transformer Engine (FP8) is not supported")
is_megatron_lm_available = _not_here("megatron_lm", "Megatron-LM is not supported")
is_pippy_available = _not_here("pippy", "pipeline-parallel inference (prepare_pippy) is not provided")
is_lomo_available = _not_here("lomo", "the LOMO optimizers are not supported")
is_rich_available = _not_here("rich", "this library does not print rich tracebacks (accelerate's use of rich)")

AVAILABILITY_NAMES: tuple[str, ...] = tuple(sorted(
    name for name, value in list(globals().items()) if name.startswith("is_") and name.endswith("_available")
    and callable(value)
))
"""Every ``is_*_available`` name this module defines (accelerate's 55)."""
