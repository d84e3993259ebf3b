"""FSDP settings: the allowed values, their checks, and accelerate's ``fsdp_config`` file keys.

One table (:data:`CHECKS`) says, for each field of
:class:`~notebook_accel.engines.fsdp.plugin.FullyShardedDataParallelPlugin`, what is allowed and how a forgiving form
(``1`` for ``FULL_SHARD``, ``"TRANSFORMER_BASED_WRAP"`` for ``"transformer_based_wrap"``, ``"A,B"`` for a list of
class names) becomes the canonical value. Both the plugin and the config file use it, so the two accept the same
values and word their problems the same way; every problem is collected, none raised here.

It lives in the config package, which validates ``fsdp_config`` with it; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from notebook_accel.config.accelerate_keys import suggest
from notebook_accel.config.value_checks import Check, check_bool, check_class_names, choice_check, run_checks, show

__all__ = [
    "SHARDING_STRATEGIES",
    "AUTO_WRAP_POLICIES",
    "STATE_DICT_TYPES",
    "BACKWARD_PREFETCH",
    "PRECISIONS",
    "CHECKS",
    "FILE_KEYS",
    "check_fields",
    "plugin_kwargs_from_file",
]

#: torch's ``ShardingStrategy`` names, in the order of accelerate's numbers (1 = FULL_SHARD ... 4 = HYBRID_SHARD).
SHARDING_STRATEGIES: tuple[str, ...] = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
AUTO_WRAP_POLICIES: tuple[str, ...] = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
STATE_DICT_TYPES: tuple[str, ...] = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
BACKWARD_PREFETCH: tuple[str, ...] = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
#: dtype names for ``mixed_precision_policy`` (a precision name, or a dict of param/reduce/output dtypes).
PRECISIONS: tuple[str, ...] = ("no", "bf16", "fp16", "fp32")
_POLICY_KEYS: tuple[str, ...] = ("param_dtype", "reduce_dtype", "output_dtype")

_show = show
_bool = check_bool
_choice = choice_check


def _sharding(value: Any) -> tuple[Any, str | None]:
    """A strategy name, or accelerate's number 1-4."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= len(SHARDING_STRATEGIES):
        return SHARDING_STRATEGIES[value - 1], None
    if isinstance(value, str) and value.strip().isdigit():
        return _sharding(int(value.strip()))
    name, problem = _choice(SHARDING_STRATEGIES)(value)
    if problem is not None:
        problem += " or their numbers 1-4"
        if isinstance(value, (int, str)) and str(value).strip() in ("5", "HYBRID_SHARD_ZERO2", "_HYBRID_SHARD_ZERO2"):
            problem += " (HYBRID_SHARD_ZERO2 is not supported; use 4, HYBRID_SHARD)"
    return name, problem


def _version(value: Any) -> tuple[Any, str | None]:
    if value in (1, 2) and not isinstance(value, bool):
        return int(value), None
    return value, f"got {_show(value)}; allowed: 1 or 2 (both run on torch's fully_shard, FSDP2)"


def _min_params(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, None
    return value, f"got {_show(value)}; allowed: a whole number of parameters >= 0, such as 100000000"


_class_names = check_class_names


def _precision_policy(value: Any) -> tuple[Any, str | None]:
    """``None`` (follow the Accelerator's mixed precision), a precision name, or a dict of dtype names."""
    if value is None:
        return None, None
    if isinstance(value, str) and value.strip().lower() in PRECISIONS:
        return value.strip().lower(), None
    allowed = (f"allowed: null, one of {', '.join(repr(p) for p in PRECISIONS)}, or a dict with keys "
               f"{', '.join(_POLICY_KEYS)} and those values")
    if isinstance(value, Mapping) and value and all(k in _POLICY_KEYS for k in value):
        dtypes = {k: str(v).strip().lower() for k, v in value.items() if isinstance(v, str)}
        if len(dtypes) == len(value) and all(v in PRECISIONS[1:] for v in dtypes.values()):
            return dtypes, None
    return value, f"got {_show(value)}; {allowed}"


#: plugin field -> its check (returns the canonical value and a problem, or None when fine).
CHECKS: dict[str, Check] = {
    "fsdp_version": _version,
    "sharding_strategy": _sharding,
    "reshard_after_forward": lambda v: (None, None) if v is None else _bool(v),
    "backward_prefetch": lambda v: (None, None) if v is None else _choice(BACKWARD_PREFETCH)(v),
    "mixed_precision_policy": _precision_policy,
    "auto_wrap_policy": lambda v: (None, None) if v is None else _choice(AUTO_WRAP_POLICIES)(v),
    "cpu_offload": _bool,
    "state_dict_type": _choice(STATE_DICT_TYPES),
    "use_orig_params": _bool,
    "sync_module_states": _bool,
    "forward_prefetch": _bool,
    "activation_checkpointing": _bool,
    "cpu_ram_efficient_loading": _bool,
    "transformer_cls_names_to_wrap": _class_names,
    "min_num_params": _min_params,
}

#: accelerate's ``fsdp_config`` keys -> plugin fields.
FILE_KEYS: dict[str, str] = {
    "fsdp_version": "fsdp_version",
    "fsdp_sharding_strategy": "sharding_strategy",
    "fsdp_reshard_after_forward": "reshard_after_forward",
    "fsdp_backward_prefetch": "backward_prefetch",
    "fsdp_backward_prefetch_policy": "backward_prefetch",
    "fsdp_auto_wrap_policy": "auto_wrap_policy",
    "fsdp_offload_params": "cpu_offload",
    "fsdp_state_dict_type": "state_dict_type",
    "fsdp_use_orig_params": "use_orig_params",
    "fsdp_sync_module_states": "sync_module_states",
    "fsdp_forward_prefetch": "forward_prefetch",
    "fsdp_activation_checkpointing": "activation_checkpointing",
    "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
    "fsdp_transformer_layer_cls_to_wrap": "transformer_cls_names_to_wrap",
    "fsdp_min_num_params": "min_num_params",
}

_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False}


def check_fields(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Check plugin field values: ``(canonical values, {field: problem})``; unknown names are not looked at."""
    return run_checks(CHECKS, values)


def _reshard_value(value: Any) -> Any:
    """accelerate's FSDP2 files write ``fsdp_reshard_after_forward`` as a bool or as a strategy name."""
    if isinstance(value, str) and value.strip().upper() in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return value.strip().upper() == "FULL_SHARD"
    if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.strip().lower()]
    return value


def plugin_kwargs_from_file(section: Any) -> tuple[dict[str, Any], list[str]]:
    """Plugin keyword arguments from accelerate's ``fsdp_config`` mapping, and every problem found.

    Each problem names the file key (``fsdp_config.fsdp_sharding_strategy: got 7 (int); allowed: ...``).

    Example:
        >>> plugin_kwargs_from_file({"fsdp_sharding_strategy": 2, "fsdp_offload_params": False})
        ({'sharding_strategy': 'SHARD_GRAD_OP', 'cpu_offload': False}, [])
    """
    if section is None:
        return {}, []
    if not isinstance(section, Mapping):
        return {}, [f"fsdp_config: got {_show(section)}; allowed: a mapping of fsdp_* settings"]
    raw: dict[str, Any] = {}
    where: dict[str, str] = {}
    problems: list[str] = []
    for key, value in section.items():
        field = FILE_KEYS.get(key) if isinstance(key, str) else None
        if field is None:
            guess = suggest(key, FILE_KEYS) if isinstance(key, str) else None
            hint = f"did you mean {guess!r}? " if guess else ""
            problems.append(f"fsdp_config.{key}: unknown FSDP setting; {hint}known: {', '.join(sorted(FILE_KEYS))}")
            continue
        if isinstance(value, str) and CHECKS[field] is _bool and value.strip().lower() in _BOOL_WORDS:
            value = _BOOL_WORDS[value.strip().lower()]
        raw[field] = _reshard_value(value) if field == "reshard_after_forward" else value
        where[field] = key
    kwargs, bad = check_fields(raw)
    problems += [f"fsdp_config.{where[name]}: {problem}" for name, problem in bad.items()]
    return kwargs, problems
