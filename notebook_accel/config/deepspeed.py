"""DeepSpeed settings: the allowed values, their checks, and accelerate's ``deepspeed_config`` file keys.

One table (:data:`CHECKS`) says, for each field of :class:`~notebook_accel.engines.deepspeed.plugin.DeepSpeedPlugin`,
what is allowed and how a forgiving form (``"2"`` for ZeRO stage 2, ``"CPU"`` for ``"cpu"``, ``"A,B"`` for a list of
class names) becomes the canonical value. The plugin and the config file both use it, so the two accept the same
values and word their problems the same way; every problem is collected, none raised here.

Rules across fields (:func:`cross_field_problems`): parameter offload needs ZeRO-3, optimizer offload needs
ZeRO 1-3, and with a DeepSpeed JSON (``deepspeed_config_file`` / ``hf_ds_config``) the settings the JSON owns
(stage, offload, accumulation, clipping, 16-bit save) must be set there, not beside it, as accelerate requires.

It lives in the config package, which validates ``deepspeed_config`` with it; nothing here imports torch or deepspeed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from notebook_accel.config.accelerate_keys import suggest
from notebook_accel.config.value_checks import (
    Check,
    check_bool,
    check_class_names,
    choice_check,
    optional,
    run_checks,
    show,
)
from notebook_accel.config.files import read_regular_file

__all__ = [
    "ZERO_STAGES",
    "OFFLOAD_DEVICES",
    "CHECKS",
    "FILE_KEYS",
    "LAUNCHER_KEYS",
    "JSON_OWNED",
    "check_fields",
    "cross_field_problems",
    "read_ds_json",
    "plugin_kwargs_from_file",
]

ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
#: Where ZeRO may keep optimizer state or parameters. ``nvme`` is refused (see :func:`_offload`).
OFFLOAD_DEVICES: tuple[str, ...] = ("none", "cpu")
#: Plugin fields a DeepSpeed JSON owns: given beside ``hf_ds_config`` they are refused (set them in the JSON).
JSON_OWNED: tuple[str, ...] = ("zero_stage", "offload_optimizer_device", "offload_param_device",
                               "gradient_accumulation_steps", "gradient_clipping", "zero3_save_16bit_model")


def _stage(value: Any) -> tuple[Any, str | None]:
    """A ZeRO stage 0-3 (an int, or its digit as text)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value in ZERO_STAGES:
        return value, None
    return value, (f"got {show(value)}; allowed: 0 (no sharding), 1 (optimizer state), 2 (+ gradients), "
                   "3 (+ parameters)")


_device_choice = choice_check(OFFLOAD_DEVICES, upper=False)


def _offload(value: Any) -> tuple[Any, str | None]:
    """``"none"`` or ``"cpu"``; ``None`` reads as ``"none"``."""
    if value is None:
        return "none", None
    if isinstance(value, str) and value.strip().lower() == "nvme":
        return value, (f"got {show(value)}; allowed: 'none', 'cpu' (NVMe offload needs DeepSpeed's async I/O op, "
                       "libaio and a GPU; notebook-accel does not run it; use 'cpu')")
    return _device_choice(value)


def _positive_int(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1_000_000:
        return value, None
    return value, f"got {show(value)}; allowed: a whole number from 1 to 1000000"


def _clip(value: Any) -> tuple[Any, str | None]:
    """A maximum gradient norm > 0 (``0`` is DeepSpeed's "no clipping" and is accepted too)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value == value:
        return float(value), None
    return value, f"got {show(value)}; allowed: a number >= 0 such as 1.0 (0 turns clipping off)"


def _ds_config(value: Any) -> tuple[Any, str | None]:
    """A DeepSpeed config: a dict, or the path of a JSON file holding one."""
    if isinstance(value, Mapping):
        return dict(value), None
    if isinstance(value, (str, Path)) and str(value).strip():
        return str(value), None
    return value, f"got {show(value)}; allowed: a DeepSpeed config dict, or the path of a DeepSpeed JSON file"


def _nvme_path(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, str):
        return value, None
    return value, f"got {show(value)}; allowed: a folder path (used only with 'nvme' offload, which is not run here)"


def _msamp(value: Any) -> tuple[Any, str | None]:
    if value is False:
        return False, None
    return value, f"got {show(value)}; allowed: false (MS-AMP FP8 training is not supported by notebook-accel)"


def _msamp_level(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, str) and value.strip().upper() in ("O1", "O2"):
        return value.strip().upper(), None
    return value, f"got {show(value)}; allowed: 'O1', 'O2' (only read with enable_msamp, which is not supported)"


#: plugin field -> its check (returns the canonical value and a problem, or None when fine).
CHECKS: dict[str, Check] = {
    "hf_ds_config": optional(_ds_config),
    "gradient_accumulation_steps": optional(_positive_int),
    "gradient_clipping": optional(_clip),
    "zero_stage": optional(_stage),
    "offload_optimizer_device": optional(_offload),
    "offload_param_device": optional(_offload),
    "offload_optimizer_nvme_path": optional(_nvme_path),
    "offload_param_nvme_path": optional(_nvme_path),
    "zero3_init_flag": optional(check_bool),
    "zero3_save_16bit_model": optional(check_bool),
    "transformer_moe_cls_names": check_class_names,
    "is_train_batch_min": check_bool,
    "enable_msamp": _msamp,
    "msamp_opt_level": _msamp_level,
}

#: accelerate's ``deepspeed_config`` keys -> plugin fields.
FILE_KEYS: dict[str, str] = {
    "deepspeed_config_file": "hf_ds_config",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_stage",
    "offload_optimizer_device": "offload_optimizer_device",
    "offload_param_device": "offload_param_device",
    "offload_optimizer_nvme_path": "offload_optimizer_nvme_path",
    "offload_param_nvme_path": "offload_param_nvme_path",
    "zero3_init_flag": "zero3_init_flag",
    "zero3_save_16bit_model": "zero3_save_16bit_model",
    "deepspeed_moe_layer_cls_names": "transformer_moe_cls_names",
}

#: accelerate's keys for its ``deepspeed`` multi-node launcher (pdsh, hostfiles): accepted and not used, since
#: notebook-accel starts every process with torch.distributed's own rendezvous.
LAUNCHER_KEYS: tuple[str, ...] = ("deepspeed_multinode_launcher", "deepspeed_hostfile",
                                  "deepspeed_exclusion_filter", "deepspeed_inclusion_filter")

_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False}


def check_fields(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Check plugin field values: ``(canonical values, {field: problem})``; unknown names are not looked at."""
    return run_checks(CHECKS, values)


def cross_field_problems(values: Mapping[str, Any], bad: set[str]) -> dict[str, str]:
    """How checked fields fit together: ``{field: problem}``; a rule is skipped when one of its fields is in ``bad``.

    ``values`` holds canonical values; a field that is absent or ``None`` was not given.
    """
    out: dict[str, str] = {}
    given = {k for k, v in values.items() if v is not None}
    if "hf_ds_config" in given and "hf_ds_config" not in bad:
        for name in JSON_OWNED:
            if name in given and values[name] not in ("none", False):
                out[name] = (f"given beside a DeepSpeed JSON config; set it in the JSON instead (accelerate refuses "
                             "the mix too), or drop the JSON")
        return out
    stage = values.get("zero_stage")
    if stage is None or "zero_stage" in bad:
        return out
    if values.get("offload_param_device", "none") not in ("none", None) and stage != 3 \
            and "offload_param_device" not in bad:
        out["offload_param_device"] = (f"got {values['offload_param_device']!r} with zero_stage={stage}; parameter "
                                       "offload needs zero_stage 3; set zero_stage to 3 or this to 'none'")
    if values.get("offload_optimizer_device", "none") not in ("none", None) and stage == 0 \
            and "offload_optimizer_device" not in bad:
        out["offload_optimizer_device"] = ("got 'cpu' with zero_stage=0; optimizer offload needs zero_stage 1, 2 "
                                           "or 3; raise zero_stage or set this to 'none'")
    return out


def read_ds_json(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """A DeepSpeed JSON file's object, or ``(None, problem)`` when it is missing, unreadable, not a regular file of
    at most 1 MiB (a device, FIFO or folder; see :func:`~notebook_accel.config.files.read_regular_file`) or not an
    object."""
    try:
        text = read_regular_file(Path(path).expanduser(), "a DeepSpeed JSON file").decode("utf-8")
    except OSError as e:
        return None, f"cannot read the DeepSpeed JSON {path!r} ({e.strerror or e}); check the path"
    except UnicodeDecodeError as e:
        return None, f"{path!r} is not UTF-8 text ({e}); a DeepSpeed config is a JSON file"
    try:
        data = json.loads(text)
    except ValueError as e:
        return None, f"{path!r} is not valid JSON ({e}); fix the file"
    if not isinstance(data, dict):
        return None, f"{path!r} holds {type(data).__name__}; a DeepSpeed config is a JSON object"
    return data, None


def _file_value(field: str, value: Any) -> Any:
    """accelerate's files write booleans and devices as words; read those forgivingly."""
    if isinstance(value, str) and field in ("zero3_init_flag", "zero3_save_16bit_model") \
            and value.strip().lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.strip().lower()]
    if value is False and field.startswith("offload_") and field.endswith("_device"):
        return "none"  # YAML 1.1 reads an unquoted `none`... as a string, but `no`/`off` as False
    return value


def plugin_kwargs_from_file(section: Any) -> tuple[dict[str, Any], list[str]]:
    """Plugin keyword arguments from accelerate's ``deepspeed_config`` mapping, and every problem found.

    Each problem names the file key (``deepspeed_config.zero_stage: got 4 (int); allowed: ...``). A
    ``deepspeed_config_file`` is read here so a missing or broken JSON is reported with the rest.

    Example:
        >>> plugin_kwargs_from_file({"zero_stage": 3, "offload_param_device": "cpu"})
        ({'zero_stage': 3, 'offload_param_device': 'cpu'}, [])
    """
    if section is None:
        return {}, []
    if not isinstance(section, Mapping):
        return {}, [f"deepspeed_config: got {show(section)}; allowed: a mapping of DeepSpeed settings"]
    raw: dict[str, Any] = {}
    where: dict[str, str] = {}
    problems: list[str] = []
    for key, value in section.items():
        if key in LAUNCHER_KEYS:
            continue
        field = FILE_KEYS.get(key) if isinstance(key, str) else None
        if field is None:
            guess = suggest(key, [*FILE_KEYS, *LAUNCHER_KEYS]) if isinstance(key, str) else None
            hint = f"did you mean {guess!r}? " if guess else ""
            problems.append(f"deepspeed_config.{key}: unknown DeepSpeed setting; {hint}known: "
                            f"{', '.join(sorted(FILE_KEYS))}")
            continue
        raw[field] = _file_value(field, value)
        where[field] = key
    kwargs, bad = check_fields(raw)
    bad.update({k: v for k, v in cross_field_problems(kwargs, set(bad)).items() if k not in bad})
    if isinstance(kwargs.get("hf_ds_config"), str) and "hf_ds_config" not in bad:
        problem = read_ds_json(kwargs["hf_ds_config"])[1]
        if problem is not None:
            bad["hf_ds_config"] = problem
    problems += [f"deepspeed_config.{where[name]}: {problem}" for name, problem in bad.items()]
    return kwargs, problems
