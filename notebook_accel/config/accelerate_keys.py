"""Compatibility with accelerate's config file.

A file written by ``accelerate config`` loads here. Its keys fall into three groups:

* the fields of :class:`~notebook_accel.config.Config` (accelerate's names where the two overlap);
* settings accelerate knows and we do not use (DeepSpeed, Megatron-LM, dynamo, IPEX, TPU and SageMaker
  fields): kept on :attr:`Config.extra` so saving the file again loses nothing, and reported with one
  :class:`ConfigWarning` when any of them is actually set (accelerate writes ``tpu_use_cluster: false`` and
  the like into every file, and an empty or false setting changes nothing, so those stay silent). ``fsdp_config``
  is one of them too, except with ``distributed_type: FSDP``, where it is validated and used (likewise
  ``deepspeed_config`` with ``distributed_type: DEEPSPEED``);
* anything else: an error, with a "did you mean" suggestion.

It also undoes YAML 1.1 surprises in hand-written files: an unquoted ``NO`` or ``no`` is read by YAML as
``False`` (``distributed_type: NO`` -> ``"NO"``, ``mixed_precision: no`` -> ``"no"``), accelerate writes
``downcast_bf16: 'no'`` as a string, and ``gpu_ids: 0`` is an integer.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from notebook_accel.errors import shown

__all__ = ["UNSUPPORTED_KEYS", "is_inactive", "suggest", "coerce_yaml_values", "unknown_key_problem"]

#: Top-level keys of accelerate's config file that notebook-accel keeps on round trip but does not use.
UNSUPPORTED_KEYS: frozenset[str] = frozenset(
    {
        # plugins
        "deepspeed_config",
        "fsdp_config",
        "megatron_lm_config",
        "dynamo_config",
        "dynamo_backend",
        "ipex_config",
        "mpirun_config",
        "fp8_config",
        "parallelism_config",
        "use_mps_device",
        # TPU
        "tpu_name",
        "tpu_zone",
        "tpu_use_cluster",
        "tpu_use_sudo",
        "tpu_vm",
        "tpu_env",
        "command_file",
        "commands",
        # SageMaker
        "ec2_instance_type",
        "iam_role_name",
        "image_uri",
        "profile",
        "region",
        "base_job_name",
        "pytorch_version",
        "transformers_version",
        "py_version",
        "sagemaker_inputs_file",
        "sagemaker_metrics_file",
        "additional_args",
    }
)

_BOOL_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_INACTIVE_STRINGS = {"", "no", "none", "false"}


def is_inactive(value: Any) -> bool:
    """True for a setting that changes nothing: null, false, empty, ``"no"``, or a mapping/list of such."""
    if value is None or value is False:
        return True
    if isinstance(value, str):
        return value.strip().lower() in _INACTIVE_STRINGS
    if isinstance(value, Mapping):
        return all(is_inactive(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(is_inactive(v) for v in value)
    return False


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``name`` (difflib, case-insensitive), or ``None`` when nothing is close."""
    pool = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(pool), n=1, cutoff=0.6)
    return pool[match[0]] if match else None


def unknown_key_problem(key: object, known_fields: Iterable[str]) -> str:
    """The problem line for a key that is neither ours nor a known accelerate setting."""
    fields = sorted(known_fields)
    if not isinstance(key, str):
        return (f"{shown(key)}: keys must be strings, got {type(key).__name__}; use one of the setting names "
                f"({', '.join(fields)})")
    guess = suggest(key, [*fields, *UNSUPPORTED_KEYS])
    hint = f"did you mean {guess!r}? " if guess else ""
    return f"{shown(key)}: unknown setting; {hint}known settings: {', '.join(fields)}"


def coerce_yaml_values(values: Mapping[str, Any], bool_fields: Iterable[str]) -> dict[str, Any]:
    """Undo YAML 1.1 readings of accelerate-style values (see the module docstring); other values pass through."""
    out = dict(values)
    if out.get("distributed_type") is False:
        out["distributed_type"] = "NO"
    if out.get("mixed_precision") is False:
        out["mixed_precision"] = "no"
    for name in bool_fields:
        value = out.get(name)
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            out[name] = _BOOL_WORDS[value.strip().lower()]
    return out
