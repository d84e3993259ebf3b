"""DDP communication hooks (accelerate's ``DistributedDataParallelKwargs(comm_hook=, comm_wrapper=,
comm_state_option=)``): torch's own hooks from ``torch.distributed.algorithms.ddp_comm_hooks``, registered on the
DDP model with ``register_comm_hook`` when it is built.

``FP16``/``BF16`` cast each gradient bucket to half precision, all-reduce it and cast the mean back (half the bytes
on the wire); ``POWER_SGD``/``BATCHED_POWER_SGD`` send a low-rank approximation of each gradient matrix (or of
each bucket), with error feedback, after ``start_powerSGD_iter`` plain all-reduces. A wrapper (``comm_wrapper``)
compresses what the hook sends, e.g. PowerSGD's factors in fp16.

torch's ``batched_powerSGD_hook`` has failed on its first compressed step since torch batched its
orthogonalization (it passes one 2-D matrix where a batch is now required); where that is so, the orthogonalization
is given a batch of one (:func:`_mend_batched_power_sgd`), which changes nothing for torch's other callers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from notebook_accel.kwargs_handlers import DDPCommunicationHookType, DistributedDataParallelKwargs
from notebook_accel.plugins import ConfigurationError

__all__ = ["register_comm_hook"]

Hook = DDPCommunicationHookType
_HOOKS: dict[DDPCommunicationHookType, Callable[..., Any]] = {
    Hook.FP16: default_hooks.fp16_compress_hook,
    Hook.BF16: default_hooks.bf16_compress_hook,
    Hook.POWER_SGD: powerSGD_hook.powerSGD_hook,
    Hook.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
}
_WRAPPERS: dict[DDPCommunicationHookType, Callable[..., Any]] = {
    Hook.FP16: default_hooks.fp16_compress_wrapper,
    Hook.BF16: default_hooks.bf16_compress_wrapper,
}


def _orthogonalize_also_one_matrix(matrices: torch.Tensor, epsilon: float = 0) -> None:
    """torch's ``_orthogonalize`` (in place), which takes a batch of matrices, also for the single matrix its own
    ``batched_powerSGD_hook`` hands it (a view with a batch of one: the batch is orthogonalized in place)."""
    _TORCH_ORTHOGONALIZE(matrices.unsqueeze(0) if matrices.dim() == 2 else matrices, epsilon)


_TORCH_ORTHOGONALIZE = powerSGD_hook._orthogonalize


def _batched_power_sgd_works() -> bool:
    """Whether torch's ``batched_powerSGD_hook`` can orthogonalize its one (2-D) matrix: since torch batched
    ``_orthogonalize`` (2022) it raises on it, on every device, before any gradient is sent."""
    try:
        _TORCH_ORTHOGONALIZE(torch.ones(4, 1))
    except (AssertionError, IndexError):
        return False
    return True


def _mend_batched_power_sgd() -> None:
    """Let torch's ``batched_powerSGD_hook`` run where its orthogonalization refuses its 2-D matrix: replace the
    module's ``_orthogonalize`` with one that also takes a single matrix (the same function for every batch)."""
    if powerSGD_hook._orthogonalize is _TORCH_ORTHOGONALIZE and not _batched_power_sgd_works():
        powerSGD_hook._orthogonalize = _orthogonalize_also_one_matrix


def register_comm_hook(model: torch.nn.parallel.DistributedDataParallel,
                       options: DistributedDataParallelKwargs | None) -> None:
    """Register the communication hook ``options`` ask for on the DDP ``model`` (nothing for ``NO``/``None``).
    (``comm_state_option`` was checked when ``options`` was built.)

    Raises:
        ConfigurationError: ``BF16`` asked for where torch cannot compress to bf16 (a CPU-only build of torch).
    """
    if options is None or options.comm_hook == Hook.NO:
        return
    hook = _HOOKS[options.comm_hook]
    if options.comm_wrapper in _WRAPPERS:
        hook = _WRAPPERS[options.comm_wrapper](hook)
    state: Any = None
    if options.comm_hook == Hook.BATCHED_POWER_SGD:
        _mend_batched_power_sgd()
    if options.comm_hook in (Hook.POWER_SGD, Hook.BATCHED_POWER_SGD):
        state = powerSGD_hook.PowerSGDState(process_group=None, **options.comm_state_option)
    try:
        model.register_comm_hook(state=state, hook=hook)
    except TypeError as e:  # torch allows bf16 compression only in its CUDA/ROCm builds with NCCL 2.10+, or on XPU
        if Hook.BF16 not in (options.comm_hook, options.comm_wrapper):
            raise
        raise ConfigurationError(f"DistributedDataParallelKwargs(comm_hook={options.comm_hook.name}, comm_wrapper="
                                 f"{options.comm_wrapper.name}): torch refuses bf16 gradient compression here ({e}); "
                                 "use FP16 instead, or run on GPUs with a CUDA build of torch") from e
