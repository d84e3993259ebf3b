"""Checks on config values: every problem is collected, none raised here.

:func:`field_problems` checks each field on its own (type, range, allowed values); :func:`cross_problems`
checks how fields fit together, skipping any check whose inputs already failed, so one mistake gives one
line rather than a cascade. Each line names the field, the bad value and what is allowed.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Mapping
from typing import Any, get_args

from notebook_accel.config.accelerate_keys import suggest
from notebook_accel.config.choices import (
    ComputeEnvironment,
    DistributedType,
    MixedPrecision,
    RdzvBackend,
)
from notebook_accel.errors import shown

__all__ = ["field_problems", "cross_problems", "parse_gpu_ids", "BOOL_FIELDS"]

BOOL_FIELDS = ("same_network", "use_cpu", "downcast_bf16", "debug", "enable_cpu_affinity")

_ACCELERATE_ONLY_TYPES = {"XLA", "TPU", "MEGATRON_LM", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU",
                          "MULTI_SDAA", "MULTI_MUSA", "MULTI_HPU"}


_MAX_COUNT = 1_000_000  # process, machine and step counts: anything larger is a typo (or a hostile file)


def _show(value: Any) -> str:
    """``repr`` of a value plus its type, short enough for one line (bounded work, whatever the value)."""
    return f"{shown(value, 60)} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    """A real integer (``True`` is not a process count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _choice(name: str, value: Any, choices: tuple[str, ...], note: str = "") -> str | None:
    """Problem for a value outside ``choices`` (with a did-you-mean), else ``None``."""
    if isinstance(value, str) and value in choices:
        return None
    guess = suggest(value, choices) if isinstance(value, str) else None
    hint = f" (did you mean {guess!r}?)" if guess and guess != value else ""
    allowed = ", ".join(repr(c) for c in choices)
    return f"{name}: got {_show(value)}{hint}; allowed: {allowed}{note}"


def _int_at_least(name: str, value: Any, low: int, optional: bool = False) -> str | None:
    """Problem for a value that is not a whole number >= ``low`` (``None`` allowed when ``optional``)."""
    if optional and value is None:
        return None
    if _is_int(value) and low <= value <= _MAX_COUNT:
        return None
    extra = " or null" if optional else ""
    return f"{name}: got {_show(value)}; allowed: a whole number from {low} to {_MAX_COUNT}{extra}"


def parse_gpu_ids(value: str) -> list[int] | None:
    """``"0,1"`` -> ``[0, 1]``; ``"all"`` -> ``None``; raises ``ValueError`` on anything else."""
    if value.strip().lower() == "all":
        return None
    parts = [p.strip() for p in value.split(",")]
    if not parts or any(not p.isdigit() for p in parts):
        raise ValueError(value)
    ids = [int(p) for p in parts]
    if len(set(ids)) != len(ids):
        raise ValueError(value)
    return ids


def _check_gpu_ids(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parse_gpu_ids(value)
            return None
        except ValueError:
            pass
    return (f"gpu_ids: got {_show(value)}; allowed: 'all', null, or distinct GPU indices separated by commas "
            "such as '0,1'")


def _check_ip(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip() and not any(c.isspace() for c in value)):
        return None
    return f"main_process_ip: got {_show(value)}; allowed: null or a host name or IP address such as '10.0.0.1'"


def _check_port(value: Any) -> str | None:
    if value is None or (_is_int(value) and 0 <= value <= 65535):
        return None
    return f"main_process_port: got {_show(value)}; allowed: null, 0 (pick a free port), or a port 1-65535"


def _check_function(value: Any) -> str | None:
    if isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value):
        return None
    return f"main_training_function: got {_show(value)}; allowed: a Python function name such as 'main'"


def _check_distributed_type(value: Any) -> str | None:
    if value is None:
        return None
    note = ""
    if isinstance(value, str) and value.upper() in _ACCELERATE_ONLY_TYPES:
        note = f" ({value} is an accelerate mode notebook-accel does not run; it runs DDP, FSDP or DeepSpeed)"
    return _choice("distributed_type", value, get_args(DistributedType), note)


def _check_mixed_precision(value: Any) -> str | None:
    return _choice("mixed_precision", value, get_args(MixedPrecision))


def _bool_check(name: str) -> Callable[[Any], str | None]:
    """The check for a true/false field."""

    def check(value: Any) -> str | None:
        return None if isinstance(value, bool) else f"{name}: got {_show(value)}; allowed: true or false"

    return check


_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "compute_environment": lambda v: _choice(
        "compute_environment", v, get_args(ComputeEnvironment), " (notebook-accel runs on this machine only)"
    ),
    "distributed_type": _check_distributed_type,
    "num_processes": lambda v: _int_at_least("num_processes", v, 1),
    "gpu_ids": _check_gpu_ids,
    "mixed_precision": _check_mixed_precision,
    "gradient_accumulation_steps": lambda v: _int_at_least("gradient_accumulation_steps", v, 1),
    "per_device_batch_size": lambda v: _int_at_least("per_device_batch_size", v, 1, optional=True),
    "num_machines": lambda v: _int_at_least("num_machines", v, 1),
    "machine_rank": lambda v: _int_at_least("machine_rank", v, 0),
    "main_process_ip": _check_ip,
    "main_process_port": _check_port,
    "rdzv_backend": lambda v: _choice("rdzv_backend", v, get_args(RdzvBackend)),
    "main_training_function": _check_function,
    **{name: _bool_check(name) for name in BOOL_FIELDS},
}


def field_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """Each field checked on its own: ``{field: problem}`` for the fields that fail."""
    out: dict[str, str] = {}
    for name, check in _CHECKS.items():
        if name in values:
            problem = check(values[name])
            if problem is not None:
                out[name] = problem
    return out


def cross_problems(v: Mapping[str, Any], bad: set[str]) -> list[str]:
    """How the fields fit together; a check is skipped when one of its fields is in ``bad``."""
    out: list[str] = []

    def ok(*names: str) -> bool:
        return not bad.intersection(names)

    dtype, n, machines = v["distributed_type"], v["num_processes"], v["num_machines"]
    if ok("distributed_type", "num_processes") and dtype == "NO" and n > 1:
        out.append(f"distributed_type: 'NO' does not fit num_processes={n}; set distributed_type to 'MULTI_GPU' or "
                   "'MULTI_CPU', or num_processes to 1")
    if ok("distributed_type", "use_cpu") and dtype == "MULTI_GPU" and v["use_cpu"]:
        out.append("use_cpu: true does not fit distributed_type='MULTI_GPU'; set use_cpu to false, or "
                   "distributed_type to 'MULTI_CPU'")
    if ok("mixed_precision", "use_cpu") and v["mixed_precision"] == "fp16" and v["use_cpu"]:
        out.append("mixed_precision: 'fp16' needs a GPU but this config runs on CPU; allowed on CPU: 'no', 'bf16'")
    if ok("num_processes", "num_machines") and n % machines:
        out.append(f"num_processes: {n} processes in total cannot be split evenly over num_machines={machines}; "
                   "num_processes counts every process on every machine, so use a multiple of num_machines")
    if ok("machine_rank", "num_machines") and v["machine_rank"] >= machines:
        out.append(f"machine_rank: got {v['machine_rank']}; allowed: 0 to {machines - 1} (num_machines={machines})")
    if ok("num_machines", "main_process_ip") and machines > 1 and v["main_process_ip"] is None:
        out.append(f"main_process_ip: required when num_machines={machines}; set it to the address of the "
                   "machine with machine_rank 0")
    if ok("gpu_ids", "num_processes", "num_machines", "use_cpu") and v["gpu_ids"] and not v["use_cpu"]:
        ids = parse_gpu_ids(v["gpu_ids"])
        per_machine = n // machines
        if ids is not None and per_machine > len(ids):
            out.append(f"gpu_ids: {v['gpu_ids']!r} lists {len(ids)} GPU(s) but each machine runs {per_machine} "
                       "processes; list more GPUs or lower num_processes")
    return out
