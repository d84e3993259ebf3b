"""The engine settings a form or a questionnaire offers: FSDP's ``fsdp_config`` and DeepSpeed's ``deepspeed_config``.

Each engine is one :class:`EngineForm`: the ``distributed_type`` that selects it, the accelerate section its values
go to, the fields to ask for (accelerate's file keys, with their kind, allowed values and default, taken from the
engine's settings table in :mod:`.fsdp` / :mod:`.deepspeed`) and that table's validator. The config picker
(``widgets/config_picker.py``) and ``notebook-accel config`` both walk these descriptions, so a new engine or a new
field is added here once, and both check answers with the same code as the config file (allowed values,
did-you-mean, every problem at once).

Fields the form does not show (``fsdp_use_orig_params``, ``deepspeed_hostfile``...) are kept from the starting
config's section. Mixed precision is the config's own ``mixed_precision`` for every engine (accelerate's file
has no per-engine key): FSDP applies it to parameters and gradient reductions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from notebook_accel.config import deepspeed as _ds
from notebook_accel.config.choices import DistributedType
from notebook_accel.config import fsdp as _fsdp

__all__ = ["FormField", "EngineForm", "ENGINES", "engine_of"]

Kind = Literal["choice", "bool", "int", "float", "text"]
Values = Mapping[str, Any]


@dataclass(frozen=True)
class FormField:
    """One setting of an engine section.

    Attributes:
        key: accelerate's file key (``fsdp_sharding_strategy``).
        label: what the form shows.
        kind: ``"choice"`` (one of :attr:`choices`; ``None`` among them means "automatic" and leaves the key
            out), ``"bool"``, ``"int"``, ``"float"`` or ``"text"`` (free text; an empty answer leaves the key out).
        default: the value offered first.
        choices: the allowed values of a choice.
        when: shown (and written) only when this holds for the section's other values; ``None``: always.
    """

    key: str
    label: str
    kind: Kind
    default: Any
    choices: tuple[Any, ...] = ()
    when: Callable[[Values], bool] | None = None

    def shown(self, values: Values) -> bool:
        """Whether this field applies, given the section's current values."""
        return self.when is None or self.when(values)


@dataclass(frozen=True)
class EngineForm:
    """The form of one engine's accelerate section.

    Attributes:
        distributed_type: the config's ``distributed_type`` that selects the engine (``"FSDP"``).
        title: the engine's name for people.
        section: the accelerate section its settings live in (``"fsdp_config"``).
        fields: the settings to offer, in order.
        validate: the engine table's section checker: ``section -> (plugin kwargs, problems)``.
        file_keys: the table's file key -> plugin field map (two keys for one field are aliases).
    """

    distributed_type: DistributedType
    title: str
    section: str
    fields: tuple[FormField, ...]
    validate: Callable[[Any], tuple[dict[str, Any], list[str]]]
    file_keys: Mapping[str, str]

    def _aliases(self, f: FormField) -> list[str]:
        """``f.key`` first, then the other file keys of the same setting (``fsdp_backward_prefetch_policy``)."""
        target = self.file_keys.get(f.key)
        return [f.key, *(k for k, v in self.file_keys.items() if v == target and k != f.key)]

    def canonical(self, f: FormField, value: Any) -> Any:
        """``value`` in the form's spelling (``1`` -> ``"FULL_SHARD"``, ``"2"`` -> ``2``), or as given when the
        table refuses it or has nothing to say."""
        kwargs, problems = self.validate({f.key: value})
        if problems or len(kwargs) != 1:
            return value
        found = next(iter(kwargs.values()))
        if f.kind == "text" and isinstance(found, (list, tuple)):
            return ",".join(str(v) for v in found)
        return "" if found is None and f.kind == "text" else found

    def defaults(self, start: Values | None = None) -> dict[str, Any]:
        """Every field's starting value: ``start``'s (a loaded section, any alias key) where it has one, in the
        form's spelling, else the default."""
        start = start or {}
        out = {}
        for f in self.fields:
            given = [start[k] for k in self._aliases(f) if k in start]
            out[f.key] = self.canonical(f, given[0]) if given else f.default
        return out

    def section_values(self, values: Values, base: Values | None = None) -> dict[str, Any]:
        """The section to write: ``base``'s keys the form does not show, then every shown field's value (an
        empty text left out); a field that does not apply is dropped."""
        shown = {f.key for f in self.fields if f.shown(values)}
        known = {k for f in self.fields for k in self._aliases(f)}
        out = {k: v for k, v in (base or {}).items() if k not in known}
        for f in self.fields:
            value = values.get(f.key, f.default)
            if f.key in shown and value is not None and not (f.kind == "text" and str(value).strip() == ""):
                out[f.key] = value.strip() if isinstance(value, str) else value
        return out

    def answer_problem(self, key: str, value: Any) -> str | None:
        """Why ``value`` is not allowed for ``key`` alone (the table's own words), or ``None``."""
        problems = self.validate({key: value})[1]
        return "; ".join(p.split(": ", 1)[-1] for p in problems) or None


def _fsdp_form() -> EngineForm:
    by_class = lambda v: v.get("fsdp_auto_wrap_policy") in (None, "TRANSFORMER_BASED_WRAP")  # noqa: E731
    by_size = lambda v: v.get("fsdp_auto_wrap_policy") == "SIZE_BASED_WRAP"  # noqa: E731
    fields = (
        FormField("fsdp_sharding_strategy", "Sharding strategy", "choice", "FULL_SHARD", _fsdp.SHARDING_STRATEGIES),
        FormField("fsdp_auto_wrap_policy", "Auto-wrap policy", "choice", None, (None, *_fsdp.AUTO_WRAP_POLICIES)),
        FormField("fsdp_transformer_layer_cls_to_wrap", "Layer classes to wrap (comma-separated; empty: the "
                  "model's _no_split_modules)", "text", "", when=by_class),
        FormField("fsdp_min_num_params", "Min. parameters per wrapped unit", "int", 100_000_000, when=by_size),
        FormField("fsdp_state_dict_type", "Checkpoint state dict", "choice", "SHARDED_STATE_DICT",
                  _fsdp.STATE_DICT_TYPES),
        FormField("fsdp_offload_params", "CPU offload (parameters and optimizer)", "bool", False),
        FormField("fsdp_activation_checkpointing", "Activation checkpointing", "bool", False),
        FormField("fsdp_cpu_ram_efficient_loading", "RAM-efficient loading (rank 0 loads)", "bool", False),
        FormField("fsdp_backward_prefetch", "Backward prefetch", "choice", "BACKWARD_PRE", _fsdp.BACKWARD_PREFETCH),
    )
    return EngineForm("FSDP", "FSDP", "fsdp_config", fields, _fsdp.plugin_kwargs_from_file, _fsdp.FILE_KEYS)


def _deepspeed_form() -> EngineForm:
    no_json = lambda v: not str(v.get("deepspeed_config_file") or "").strip()  # noqa: E731
    fields = (
        FormField("deepspeed_config_file", "DeepSpeed JSON file (empty: the settings below)", "text", ""),
        FormField("zero_stage", "ZeRO stage", "choice", 2, _ds.ZERO_STAGES, when=no_json),
        FormField("offload_optimizer_device", "Optimizer offload", "choice", "none", _ds.OFFLOAD_DEVICES,
                  when=no_json),
        FormField("offload_param_device", "Parameter offload (ZeRO-3)", "choice", "none", _ds.OFFLOAD_DEVICES,
                  when=no_json),
        FormField("gradient_clipping", "Gradient clipping (0: off)", "float", 1.0, when=no_json),
        FormField("zero3_init_flag", "Build the model sharded (zero3_init_flag)", "bool", False),
        FormField("zero3_save_16bit_model", "Save 16-bit weights under ZeRO-3", "bool", False, when=no_json),
    )
    return EngineForm("DEEPSPEED", "DeepSpeed", "deepspeed_config", fields, _ds.plugin_kwargs_from_file,
                      _ds.FILE_KEYS)


#: distributed_type -> its engine form.
ENGINES: dict[str, EngineForm] = {form.distributed_type: form for form in (_fsdp_form(), _deepspeed_form())}


def engine_of(distributed_type: str | None) -> EngineForm | None:
    """The engine form a ``distributed_type`` selects, or ``None`` (plain DDP or one process)."""
    return ENGINES.get(str(distributed_type)) if distributed_type is not None else None
