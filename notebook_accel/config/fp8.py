"""accelerate's ``fp8_config`` section, used with ``mixed_precision: fp8``.

Only accelerate's torchao backend (``backend: AO``) runs here; its switches ``pad_inner_dim`` and
``enable_fsdp_float8_all_gather`` keep accelerate's meaning, and ``emulate`` (ours) asks for torchao's emulation,
which runs on any device (slowly). The options reach every worker's Accelerator (see
:mod:`notebook_accel.float8.recipe`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from notebook_accel.errors import shown
from notebook_accel.float8.facts import fp8_problems

__all__ = ["FP8_SECTION", "FP8_SWITCHES", "asks_for_emulation", "fp8_config_problems", "fp8_options_json",
           "options_from_file"]

FP8_SECTION = "fp8_config"
FP8_SWITCHES: tuple[str, ...] = ("emulate", "pad_inner_dim", "enable_fsdp_float8_all_gather")
_ENGINES = {"FSDP": "FSDP", "DEEPSPEED": "DEEPSPEED"}  # other distributed types train with the plain engine


def options_from_file(section: Any) -> tuple[dict[str, bool], list[str]]:
    """``fp8_config`` as ``({switch: bool}, problems)``; an absent or empty section gives ``({}, [])``.

    Example:
        >>> options_from_file({"backend": "AO", "emulate": True})
        ({'emulate': True}, [])
    """
    if section is None or section == {}:
        return {}, []
    if not isinstance(section, Mapping):
        return {}, [f"{FP8_SECTION}: got {shown(section)}; allowed: a mapping such as {{backend: AO, emulate: true}}"]
    problems: list[str] = []
    backend = section.get("backend", "AO")
    if not isinstance(backend, str) or backend.upper() != "AO":
        problems.append(f"{FP8_SECTION}.backend: got {shown(backend)}; allowed: AO (torchao float8; Transformer "
                        "Engine (TE) and MS-AMP (MSAMP) are not supported)")
    options: dict[str, bool] = {}
    for key, value in section.items():
        if key == "backend":
            continue
        if key not in FP8_SWITCHES:
            problems.append(f"{FP8_SECTION}.{key}: not a setting of the AO backend; allowed: "
                            f"backend, {', '.join(FP8_SWITCHES)}")
        elif not isinstance(value, bool):
            problems.append(f"{FP8_SECTION}.{key}: got {shown(value)}; allowed: true or false")
        else:
            options[key] = value
    return options, problems


def fp8_config_problems(mixed_precision: Any, section: Any, use_cpu: Any, distributed_type: Any) -> list[str]:
    """What is wrong with a config's fp8 settings: the section itself, and fp8 on the CPU without emulation or
    with DeepSpeed. Nothing is checked unless ``mixed_precision`` is ``"fp8"`` (the section is then kept, unused)."""
    if mixed_precision != "fp8":
        return []
    options, problems = options_from_file(section)
    engine = _ENGINES.get(str(distributed_type), "DDP")
    cpu = use_cpu is True
    found = fp8_problems(emulate=options.get("emulate", False) or not cpu, engine=engine,
                         capabilities=None, torchao=True)  # GPUs and torchao are the launching machine's to check
    return problems + found


def asks_for_emulation(extra: Mapping[str, Any]) -> bool:
    """True when a config's settings (:attr:`Config.extra`) ask for torchao's fp8 emulation (``emulate: true``)."""
    return options_from_file(extra.get(FP8_SECTION))[0].get("emulate", False)


def fp8_options_json(mixed_precision: str, section: Any) -> str | None:
    """The options a launch sends its workers (JSON), or ``None`` without fp8 or without switches."""
    if mixed_precision != "fp8":
        return None
    options = options_from_file(section)[0]
    return json.dumps(options, sort_keys=True) if options else None
