"""Checks made before any fork: the function, the arguments, the devices, and whether CUDA is still usable.

Every refusal is a :class:`~notebook_accel.errors.LaunchError` (nothing started, nothing to clean up) that
names the bad value, the allowed values and the fix.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

from notebook_accel import hardware
from notebook_accel.config import Config
from notebook_accel.config.fp8 import FP8_SECTION, fp8_options_json
from notebook_accel.environment import EngineLaunch
from notebook_accel.errors import CudaInitializedError, LaunchError, shown
from notebook_accel.float8 import fp8_problems

__all__ = [
    "Backend",
    "check_callable",
    "check_positive_int",
    "check_flag",
    "check_mixed_precision",
    "check_fp8",
    "fp8_options",
    "check_timeout",
    "check_master_addr",
    "check_port",
    "max_cpu_processes",
    "check_nodes",
    "parse_gpu_ids",
    "resolve_devices",
    "cuda_initialized",
    "refuse_if_cuda_initialized",
]

Backend = Literal["gloo", "nccl"]
MixedPrecision = Literal["no", "fp16", "bf16", "fp8"]
_MIXED_PRECISION = ("no", "fp16", "bf16", "fp8")
_CUDA_ERROR_NOT_INITIALIZED = 3


def check_callable(function: object) -> None:
    """Raise unless ``function`` can be called (``notebook_launcher(train())`` is the usual slip)."""
    if not callable(function):
        raise LaunchError(
            f"notebook_launcher needs a function to run in each worker, got {type(function).__name__} "
            f"{shown(function, 80)}; pass the function itself (notebook_launcher(train, args=(...))), not its result "
            "(notebook_launcher(train(...)))"
        )


MAX_COUNT = 1_000_000  # machines, accumulation steps: anything larger is a typo (the config has the same bound)


def check_positive_int(name: str, value: object, maximum: int | None = MAX_COUNT) -> int:
    """``value`` as an int from 1 to ``maximum`` (``None``: no bound here, the caller checks one that says
    more), else :class:`LaunchError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (maximum is not None and value > maximum):
        allowed = "a whole number >= 1" if maximum is None else f"a whole number from 1 to {maximum}"
        raise LaunchError(f"{name}={shown(value)} is not allowed; pass {allowed}")
    return value


def check_flag(name: str, value: object, optional: bool = False) -> bool | None:
    """``value`` as a bool (``None`` too when ``optional``), else :class:`LaunchError` naming ``name``.

    Strings are refused on purpose: ``use_cpu="no"`` would be true.
    """
    if isinstance(value, bool) or (optional and value is None):
        return value
    allowed = "True, False or None" if optional else "True or False"
    raise LaunchError(f"{name}={shown(value)} is not allowed; pass {allowed}")


def check_mixed_precision(value: object) -> MixedPrecision | None:
    """``None`` or one of ``"no"``, ``"fp16"``, ``"bf16"``, ``"fp8"``."""
    if value is None or value in _MIXED_PRECISION:
        return value  # type: ignore[return-value]
    raise LaunchError(f"mixed_precision={shown(value)} is not allowed; use one of {list(_MIXED_PRECISION)} or None")


def fp8_options(precision: str | None, config: Config | None) -> str | None:
    """The config's ``fp8_config`` switches (JSON) a launch sends its workers when it runs in fp8 (the argument's
    ``"fp8"`` or the config's), else ``None``."""
    if precision != "fp8" or config is None:
        return None
    return fp8_options_json("fp8", config.extra.get(FP8_SECTION))


def check_fp8(precision: str | None, config: Config | None, devices: Sequence[str],
              engine: EngineLaunch | None) -> str | None:
    """For ``"fp8"``, refuse before any fork what cannot train in fp8 here: torchao missing, a chosen GPU older
    than compute capability 8.9 or the CPU (unless the config's ``fp8_config`` asks for emulation), DeepSpeed.

    Returns the config's ``fp8_config`` switches (JSON) for the workers, or ``None``. GPUs are read through NVML
    (CUDA is never initialised here).

    Raises:
        LaunchError: naming each thing that is missing.
    """
    if precision != "fp8":
        return None
    options = fp8_options(precision, config)
    emulate = bool(options and json.loads(options).get("emulate"))
    gpus = hardware.detect_gpus()
    capabilities = None if not devices or devices[0] == "cpu" else \
        [gpus[int(d.partition(":")[2] or 0)].compute_capability for d in devices]
    problems = fp8_problems(emulate=emulate, engine=engine.name if engine is not None else "DDP",
                            capabilities=capabilities)
    if problems:
        raise LaunchError("; ".join(problems) + " (nothing was started)")
    return options


def max_cpu_processes() -> int:
    """The most CPU workers one launch may fork: 8 per core, at least 64 (far beyond any useful number, but
    a typo such as ``10**12`` is refused before the machine runs out of processes)."""
    return max(64, 8 * hardware.cpu_count())


def check_timeout(value: object) -> float | None:
    """``None`` or a positive, finite number of seconds (any size: the supervisor waits in bounded steps)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LaunchError(f"timeout={shown(value)} is not allowed; pass a number of seconds > 0, or None for no limit")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not 0 < seconds < math.inf:
        raise LaunchError(f"timeout={shown(value)} is not allowed; pass a number of seconds > 0, or None for no limit")
    return seconds


def check_port(value: object) -> int | None:
    """``None``/``0`` (pick a free port) or a TCP port as an int or a string of digits (accelerate passes
    ``use_port="29500"``), 1 to 65535."""
    if value is None:
        return None
    port: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        port = value
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 5:
        port = int(value.strip())
    if port is None or not 0 <= port <= 65535:
        raise LaunchError(
            f"use_port={shown(value)} is not a TCP port; pass a port from 1024 to 65535 (an int or a string such as "
            "'29500'), or None to pick a free one"
        )
    return port or None


def check_master_addr(value: object) -> str:
    """A non-empty host name or address, as a string."""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise LaunchError(
            f"master_addr={shown(value)} is not allowed; pass a host name or IP address as a string, e.g. '127.0.0.1' "
            "for a single machine or node 0's address for several"
        )
    return value


def check_nodes(num_nodes: object, node_rank: object, port: int | None, master_addr: str) -> tuple[int, int]:
    """Validate a multi-node launch: node_rank in range, an agreed port, a reachable address."""
    nodes = check_positive_int("num_nodes", num_nodes)
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or not 0 <= node_rank < nodes:
        raise LaunchError(f"node_rank={shown(node_rank)} is not allowed; with num_nodes={nodes} use 0 to {nodes - 1}")
    if nodes > 1 and port is None:
        raise LaunchError(
            f"num_nodes={nodes} needs use_port= (the same port on every node, free on node 0); "
            "a port picked at random could not be agreed on"
        )
    if nodes > 1 and master_addr in ("127.0.0.1", "localhost", "::1"):
        raise LaunchError(
            f"num_nodes={nodes} with master_addr={shown(master_addr)}: other machines cannot reach a loopback address; "
            "pass master_addr= with node 0's address on your network"
        )
    return nodes, node_rank


def parse_gpu_ids(gpu_ids: object) -> list[int] | None:
    """``None``/``"all"`` -> ``None`` (every visible GPU); ``"0,1"``, ``1`` or ``[0, 1]`` -> ``[0, 1]``."""
    if gpu_ids is None or (isinstance(gpu_ids, str) and gpu_ids.strip().lower() in ("all", "")):
        return None
    try:
        if isinstance(gpu_ids, str):
            ids = [int(part) for part in gpu_ids.split(",") if part.strip()]
        elif isinstance(gpu_ids, int) and not isinstance(gpu_ids, bool):
            ids = [gpu_ids]
        elif isinstance(gpu_ids, Sequence) and all(isinstance(i, int) and not isinstance(i, bool) for i in gpu_ids):
            ids = list(gpu_ids)
        else:
            raise ValueError(gpu_ids)
    except ValueError as e:
        raise LaunchError(
            f"gpu_ids={shown(gpu_ids)} is not allowed; pass 'all', a comma-separated string like '0,1', "
            "or a list of device indices like [0, 1]"
        ) from e
    if len(set(ids)) != len(ids):
        raise LaunchError(f"gpu_ids={shown(gpu_ids)} lists a device twice; give each device index once")
    return ids


def resolve_devices(
    num_processes: int | None, gpu_ids: object, use_cpu: bool = False
) -> tuple[list[str], Backend]:
    """Decide each local worker's device and the backend.

    Worker ``i`` gets visible CUDA device ``i`` (or ``gpu_ids[i]``) with nccl; without a visible GPU (or with
    ``use_cpu``) every worker gets ``"cpu"`` with gloo. ``num_processes=None`` means one per chosen GPU, else 1.

    Raises:
        LaunchError: ``num_processes`` above the chosen GPUs, ``gpu_ids`` that do not exist or without a GPU.
    """
    if num_processes is not None:
        check_positive_int("num_processes", num_processes, maximum=None)  # bounded below, per device kind
    ids = parse_gpu_ids(gpu_ids)
    visible = 0 if use_cpu else hardware.visible_gpu_count()
    if visible == 0:
        if ids is not None and not use_cpu:
            raise LaunchError(
                f"gpu_ids={shown(gpu_ids)} but no GPU is visible (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides "
                "them); "
                "drop gpu_ids to run on CPU, or check CUDA_VISIBLE_DEVICES"
            )
        count = num_processes or 1
        limit = max_cpu_processes()
        if count > limit:
            raise LaunchError(
                f"num_processes={shown(count)} CPU workers on a machine with {hardware.cpu_count()} cores is more "
                "than the "
                f"{limit} allowed (each worker is a full process with its own copy of the model); pass "
                f"num_processes<={limit}, usually one per core or fewer"
            )
        return ["cpu"] * count, "gloo"
    allowed = list(range(visible))
    if ids is None:
        ids = allowed
    missing = [i for i in ids if i not in allowed]
    if missing:
        raise LaunchError(
            f"gpu_ids={shown(gpu_ids)}: device(s) {missing} do not exist; this process sees {visible} GPU(s), "
            f"indices {allowed} (after CUDA_VISIBLE_DEVICES); pick from those"
        )
    count = len(ids) if num_processes is None else num_processes
    if count > len(ids):
        raise LaunchError(
            f"num_processes={shown(count)} but only {len(ids)} GPU(s) are available for this launch ({ids}); "
            f"pass num_processes<={len(ids)}, or more gpu_ids, or use_cpu=True to run {shown(count)} CPU workers"
        )
    return [f"cuda:{i}" for i in ids[:count]], "nccl"


def _driver_initialized() -> bool:
    """True when the CUDA driver is loaded in this process and ``cuInit`` has run (torch may not know)."""
    try:
        libcuda: Any = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # loaded already?
    except (OSError, AttributeError):
        return False
    count = ctypes.c_int(0)
    return int(libcuda.cuDeviceGetCount(ctypes.byref(count))) != _CUDA_ERROR_NOT_INITIALIZED


def cuda_initialized() -> bool:
    """Whether CUDA is initialised in this process, so forked children could not use it.

    Asks torch (only when torch is already imported: this never imports it) and then probes the driver
    itself, which also catches a ``torch.cuda.device_count()`` outside NVML mode or another library's CUDA.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        if cuda.is_initialized():
            return True
        bad_fork = getattr(cuda, "_is_in_bad_fork", None)
        if bad_fork is not None and bad_fork():
            return True
    return _driver_initialized()


def refuse_if_cuda_initialized() -> None:
    """Raise :class:`CudaInitializedError` when CUDA is initialised in this (kernel) process."""
    if cuda_initialized():
        raise CudaInitializedError(
            "CUDA is already initialised in this process (an earlier cell used the GPU: a tensor or model moved to "
            "'cuda', torch.cuda.device_count() / get_device_name(), or another CUDA library), so forked workers "
            "could not use it. Restart the kernel, then call notebook_launcher before any CUDA call in the kernel: "
            "do all GPU work inside the launched function. (num_processes=1 runs in this process and is not affected.)"
        )
