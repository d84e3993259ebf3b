"""Process state: who this process is in a run, its device and its process group.

:class:`ProcessState` is an explicit object built from :class:`~notebook_accel.environment.LaunchEnvironment`
(the only place that reads env vars). There is no Borg singleton: every Accelerator builds its own state, and the
process group, which torch keeps per process, is created by the first one and shared by the next ones.

Without a GPU a launched multi-process run forms one real gloo group (``MULTI_CPU``) with no extra flag.

:class:`~notebook_accel.gradient_state.GradientState` is importable from here too, as from ``accelerate.state``.
"""

from __future__ import annotations

import atexit
import contextlib
import math
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import NotebookAccelError, shown
from notebook_accel.gradient_state import GradientState
from notebook_accel.kwargs_handlers import InitProcessGroupKwargs

__all__ = ["DistributedType", "ProcessState", "PartialState", "AcceleratorState", "GradientState", "ProcessGroupError",
           "ProcessHelperError", "destroy_at_exit"]

T = TypeVar("T")


class ProcessGroupError(NotebookAccelError, RuntimeError):
    """The process group could not be formed or does not match the launch environment."""


class DistributedType(str, Enum):
    """How the run is distributed (accelerate's names).

    A run here is only ever ``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ``FSDP`` or ``DEEPSPEED``. accelerate's other
    members exist so that code comparing against them (``state.distributed_type == DistributedType.XLA``) runs;
    they are never the current type.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"
    DEEPSPEED = "DEEPSPEED"
    # accelerate's other backends: never current here (CPU and CUDA only)
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"


def _pick_device(env: LaunchEnvironment, cpu: bool) -> torch.device:
    """``cpu`` -> cpu; else the launcher's device; else ``cuda:LOCAL_RANK`` when CUDA is available; else cpu."""
    if cpu:
        return torch.device("cpu")
    if env.device is not None:
        device = torch.device(env.device)
    elif torch.cuda.is_available():
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        if device.index is None:  # "cuda" alone: this process's local device
            device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    return device


def _init_group(env: LaunchEnvironment, backend: str, kwargs: InitProcessGroupKwargs | None) -> None:
    """Create the default process group, or check that an existing one matches the environment."""
    if dist.is_initialized():
        if dist.get_world_size() != env.world_size or dist.get_rank() != env.rank:
            raise ProcessGroupError(
                f"a process group already exists with rank {dist.get_rank()} of {dist.get_world_size()}, but the "
                f"environment says rank {env.rank} of {env.world_size}; call "
                "torch.distributed.destroy_process_group() first (in a notebook: restart the kernel)"
            )
        return
    init_method = kwargs.init_method if kwargs and kwargs.init_method else "env://"
    if init_method == "env://" and (env.master_addr is None or env.master_port is None):
        raise ProcessGroupError(
            f"WORLD_SIZE={env.world_size} but MASTER_ADDR/MASTER_PORT are not set (got {env.master_addr!r}, "
            f"{env.master_port!r}); start the run with notebook_launcher or torchrun, which set them"
        )
    extra: dict[str, Any] = {}
    if kwargs is not None and kwargs.timeout is not None:
        extra["timeout"] = kwargs.timeout
    dist.init_process_group(backend, init_method=init_method, rank=env.rank, world_size=env.world_size, **extra)
    if backend == "gloo":
        # gloo connects the ranks pairwise inside init: one rank can return from it while another still reads its
        # handshake, and a worker that then exits at once (a short launched function) breaks that peer's init
        # ("connectFullMesh failed ... Connection closed by peer"; 2 in 15 launches here). A barrier ends init
        # together on every rank.
        dist.barrier()
    destroy_at_exit(dist.group.WORLD)


def destroy_at_exit(group: Any) -> None:
    """Destroy ``group`` (a default group we created) when the interpreter exits, unless the user already did.

    Every default group this package forms registers here: the launched or torchrun one above, and DeepSpeed's
    one-process group in memory (seen aborting a CI run at exit before it registered).
    """
    atexit.register(_destroy, group)


def _destroy(group: Any) -> None:
    """Destroy ``group`` if it is still the default group.

    Left to C++ static destructors, a gloo group aborts the process at exit now and then ("terminate called
    without an active exception", SIGABRT: seen in 2 of 12 plain torchrun runs here, 0 of 16 with this). Launched
    notebook workers leave through ``os._exit`` and never get here.
    """
    try:
        if dist.is_initialized() and dist.group.WORLD is group:
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - best effort at exit; a failure here must not mask the real exit status
        pass


class ProcessState:
    """This process's place in the run, its device and backend; forms the process group when needed.

    Args:
        cpu: force the CPU even when CUDA is available.
        init_kwargs: options for ``init_process_group`` (backend, init_method, timeout).
        env: the launch environment; read from ``os.environ`` when omitted.

    Raises:
        ProcessGroupError: distributed launch without a rendezvous address, or an existing group of another size.

    Example:
        >>> state = ProcessState(cpu=True)     # a plain single process
        >>> (state.process_index, state.num_processes, state.distributed_type.value)
        (0, 1, 'NO')
    """

    def __init__(
        self,
        cpu: bool = False,
        init_kwargs: InitProcessGroupKwargs | None = None,
        env: LaunchEnvironment | None = None,
    ) -> None:
        self.env = env if env is not None else LaunchEnvironment.from_environ()
        self.device: torch.device = _pick_device(self.env, cpu)
        default_backend = "nccl" if self.device.type == "cuda" else "gloo"
        self.backend: str | None = (init_kwargs.backend if init_kwargs and init_kwargs.backend else default_backend)
        self.process_index: int = self.env.rank
        self.local_process_index: int = self.env.local_rank
        self.num_processes: int = self.env.world_size
        self.local_num_processes: int = self.env.local_world_size
        if self.num_processes > 1:
            _init_group(self.env, self.backend, init_kwargs)
            kind = DistributedType.MULTI_GPU if self.device.type == "cuda" else DistributedType.MULTI_CPU
        else:
            self.backend = None
            kind = DistributedType.NO
        self.distributed_type: DistributedType = kind
        self.fsdp_plugin: Any = None  # set by the Accelerator's engine choice (engines/select.py), as in accelerate
        self.deepspeed_plugin: Any = None  # ``None`` without DeepSpeed, as ``accelerator.state.deepspeed_plugin``

    def __repr__(self) -> str:
        return (f"ProcessState(type={self.distributed_type.value}, rank={self.process_index}/{self.num_processes}, "
                f"local_rank={self.local_process_index}, device={self.device}, backend={self.backend})")

    @property
    def rank(self) -> int:
        """Alias of :attr:`process_index`."""
        return self.process_index

    @property
    def use_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on local rank 0 of each machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """True on the highest global rank."""
        return self.process_index == self.num_processes - 1

    def wait_for_everyone(self) -> None:
        """Barrier across all processes (nothing in a single process)."""
        if self.use_distributed:
            dist.barrier()

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` (default: the whole run's group) if it exists; nothing in a single process.

        Call it once at the end of a script, as with accelerate; every Accelerator of this process shares the
        group, so none of them can run a collective afterwards.
        """
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """accelerate's way to forget its shared state; nothing to forget here.

        accelerate keeps one state per process and its tests reset it before building an Accelerator with other
        options. Every Accelerator here builds its own state, so a new one already starts fresh, and an existing
        one keeps working (accelerate's breaks until rebuilt).
        """

    @contextlib.contextmanager
    def _first(self, leader: bool) -> Iterator[None]:
        """Run the body on ``leader`` first, then on the others."""
        if not leader:
            self.wait_for_everyone()
        yield
        if leader:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: the main process runs the body, then the others (e.g. download once, then read)."""
        return self._first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: the local main process of each machine runs the body first."""
        return self._first(self.is_local_main_process)

    def on_process(self, function: Callable[..., T] | None = None, process_index: int | None = None) -> Any:
        """Decorator: run ``function`` only on ``process_index`` (others get ``None``; no barrier)."""
        if process_index is None:
            raise ProcessHelperError("on_process needs process_index=, e.g. @accelerator.on_process(process_index=1)")
        if function is None:
            return lambda fn: self.on_process(fn, process_index)
        return _only_if(self.process_index == process_index, function)

    def on_main_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run ``function`` only on the main process (others get ``None``; no barrier)."""
        return _only_if(self.is_main_process, function)

    def on_local_main_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run ``function`` only on each machine's local main process."""
        return _only_if(self.is_local_main_process, function)

    def on_last_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run ``function`` only on the last process."""
        return _only_if(self.is_last_process, function)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of ``inputs`` (list, tuple, dict of sequences, tensor, or a
        dataset with ``select(indices)`` such as a Hugging Face ``datasets.Dataset``).

        The first ``len % n`` processes get one extra item; ``apply_padding`` repeats the last item so every
        share has the same length (useful before :func:`gather`).

        Example:
            >>> with ProcessState(cpu=True).split_between_processes([1, 2, 3]) as part:
            ...     part
            [1, 2, 3]
        """
        yield _split(inputs, self.process_index, self.num_processes, apply_padding)


class ProcessHelperError(NotebookAccelError, ValueError):
    """A process helper got a bad argument."""


def _only_if(condition: bool, function: Callable[..., T]) -> Callable[..., T | None]:
    """``function`` itself when ``condition`` holds, else a no-op with the same name."""
    if condition:
        return function

    def skipped(*args: Any, **kwargs: Any) -> None:
        return None

    skipped.__name__ = getattr(function, "__name__", "skipped")
    skipped.__doc__ = getattr(function, "__doc__", None)
    return skipped


def _split(inputs: Any, rank: int, n: int, apply_padding: bool) -> Any:
    """The ``rank``-th contiguous share of ``inputs`` out of ``n``."""
    if isinstance(inputs, dict):
        for key, value in inputs.items():
            splittable = isinstance(value, (list, tuple, dict)) or (
                value.dim() > 0 if isinstance(value, torch.Tensor)
                else callable(getattr(value, "select", None)) and hasattr(value, "__len__"))
            if not splittable:
                raise ProcessHelperError(
                    f"split_between_processes(inputs=...): the dict's value {shown(key, 40)}: {shown(value, 40)} "
                    f"({type(value).__name__}) cannot be split; allowed: a dict whose values are lists, tuples or "
                    "tensors of the same length, e.g. {'a': [1, 2, 3]}"
                )
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ProcessHelperError(
                f"split_between_processes: every value of the dict must have the same length, got {sorted(lengths)}"
            )
        return {k: _split(v, rank, n, apply_padding) for k, v in inputs.items()}
    selectable = callable(getattr(inputs, "select", None)) and hasattr(inputs, "__len__")  # a datasets.Dataset
    if not isinstance(inputs, (list, tuple, torch.Tensor)) and not selectable:
        raise ProcessHelperError(
            f"split_between_processes(inputs=...): cannot split a {type(inputs).__name__}; pass a list, tuple, dict, tensor "
            "or a dataset with select(indices) (a Hugging Face datasets.Dataset)"
        )
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 0:
        raise ProcessHelperError("split_between_processes(inputs=...): cannot split a 0-dimensional tensor; pass a "
                                 "tensor with at least one dimension (it is split along the first)")
    total = len(inputs)
    per, extra = divmod(total, n)
    start = rank * per + min(rank, extra)
    end = start + per + (1 if rank < extra else 0)
    if selectable and not isinstance(inputs, (list, tuple, torch.Tensor)):
        indices = list(range(start, end))
        if apply_padding and total > 0:
            indices += [total - 1] * (math.ceil(total / n) - len(indices))
        return inputs.select(indices)
    part = inputs[start:end]
    if apply_padding and total > 0:
        want = math.ceil(total / n)
        missing = want - len(part)
        if missing > 0:
            last = inputs[-1:]
            if isinstance(part, torch.Tensor):
                part = torch.cat([part, *([cast(torch.Tensor, last)] * missing)])
            else:
                part = part + type(part)(last) * missing
    return part


PartialState = ProcessState
"""accelerate's name for the process state; ``PartialState()`` builds one from the environment."""


class AcceleratorState(ProcessState):
    """accelerate's ``AcceleratorState``: the process state plus the launch's mixed precision.

    ``accelerator.state`` is the state of an Accelerator; ``AcceleratorState()`` builds one from the
    environment (as inside a launched worker), like :data:`PartialState`.
    """

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"`` or ``"bf16"`` as the launch chose it (``"no"`` outside a launch)."""
        return self.env.mixed_precision or "no"
