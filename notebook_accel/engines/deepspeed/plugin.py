"""``DeepSpeedPlugin``: accelerate's DeepSpeed options object, validated on construction.

Every field has accelerate's name. Without ``hf_ds_config`` the plugin writes a DeepSpeed config from its fields
(ZeRO stage, offload devices, accumulation, clipping, 16-bit save); with one (a dict, or a JSON file read here),
that config is used and the fields it owns must not be given beside it. Values left ``"auto"`` are filled in by
the Accelerator at ``prepare`` (:mod:`.auto`). Nothing here imports torch or deepspeed.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from notebook_accel.config import Config
from notebook_accel.config.deepspeed import CHECKS, JSON_OWNED, check_fields, cross_field_problems, read_ds_json
from notebook_accel.plugins import ConfigurationError, fields_from_json

__all__ = ["DeepSpeedPlugin"]

_DEFAULT_STAGE = 2


@dataclass
class DeepSpeedPlugin:
    """How :meth:`Accelerator.prepare` hands a model and its optimizer to DeepSpeed.

    Args:
        hf_ds_config: a DeepSpeed config dict, or the path of a DeepSpeed JSON file; ``"auto"`` values in it are
            filled from the Accelerator (micro batch size from the prepared loader, accumulation steps, clipping,
            bf16/fp16 from ``mixed_precision``).
        gradient_accumulation_steps: batches per optimizer step; ``None`` takes the Accelerator's.
        gradient_clipping: the maximum gradient norm DeepSpeed clips to inside its step; ``None``: no clipping.
        zero_stage: 0 (plain data parallel), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters);
            default 2.
        offload_optimizer_device: ``"none"`` or ``"cpu"`` (optimizer state and step in CPU memory; ZeRO 1-3).
        offload_param_device: ``"none"`` or ``"cpu"`` (parameters in CPU memory; ZeRO-3 only).
        offload_optimizer_nvme_path, offload_param_nvme_path: accepted for compatibility (NVMe offload is refused).
        zero3_init_flag: accepted for compatibility: models are built before the Accelerator sees them, so ZeRO-3
            partitions them in ``prepare`` (``deepspeed.zero.Init`` is not applied to user code).
        zero3_save_16bit_model: under ZeRO-3, ``save_model``/``get_state_dict`` gather the weights in their
            training dtype (always done here; the flag is recorded in the DeepSpeed config for DeepSpeed's own
            ``save_16bit_model``).
        transformer_moe_cls_names: MoE layer class names (a list, or ``"A,B"``), made ZeRO-3 leaf modules
            (their parameters are gathered together, as MoE routing needs).
        is_train_batch_min: accepted for compatibility: the first prepared DataLoader (the training one) gives
            the micro batch size.
        enable_msamp, msamp_opt_level: accepted for compatibility; ``enable_msamp=True`` (MS-AMP FP8) is refused.

    Attributes:
        deepspeed_config: the DeepSpeed config dict (``"auto"`` values still in it until ``prepare``).

    Raises:
        ConfigurationError: every bad field at once, each with the allowed values.

    Example:
        >>> plugin = DeepSpeedPlugin(zero_stage=3, offload_param_device="cpu")
        >>> plugin.deepspeed_config["zero_optimization"]["offload_param"]
        {'device': 'cpu'}
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: int | None = None
    gradient_clipping: float | None = None
    zero_stage: int | None = None
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    transformer_moe_cls_names: Any = None
    is_train_batch_min: bool = True
    enable_msamp: bool = False
    msamp_opt_level: str = "O1"
    deepspeed_config: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        values = {name: getattr(self, name) for name in CHECKS}
        canonical, problems = check_fields(values)
        problems.update({k: v for k, v in cross_field_problems(canonical, set(problems)).items()
                         if k not in problems})
        config: dict[str, Any] | None = None
        if isinstance(canonical.get("hf_ds_config"), str) and "hf_ds_config" not in problems:
            config, problem = read_ds_json(canonical["hf_ds_config"])
            if problem is not None:
                problems["hf_ds_config"] = problem
        if problems:
            lines = [f"  - {name}: {problem}" for name, problem in problems.items()]
            raise ConfigurationError("DeepSpeedPlugin: invalid options\n" + "\n".join(lines))
        for name, value in canonical.items():
            setattr(self, name, value)
        if isinstance(self.hf_ds_config, dict):
            config = self.hf_ds_config
        self.deepspeed_config = copy.deepcopy(config) if config is not None else self._written_config()
        self._read_back()

    def _written_config(self) -> dict[str, Any]:
        """The DeepSpeed config the fields describe (no JSON given)."""
        stage = self.zero_stage if self.zero_stage is not None else _DEFAULT_STAGE
        zero: dict[str, Any] = {"stage": stage}
        if stage >= 1:
            zero["offload_optimizer"] = {"device": self.offload_optimizer_device or "none"}
        if stage == 3:
            zero["offload_param"] = {"device": self.offload_param_device or "none"}
            zero["stage3_gather_16bit_weights_on_model_save"] = bool(self.zero3_save_16bit_model)
        return {
            "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": self.gradient_accumulation_steps or "auto",
            "gradient_clipping": self.gradient_clipping if self.gradient_clipping is not None else "auto",
            "zero_optimization": zero,
            "bf16": {"enabled": "auto"},
            "fp16": {"enabled": "auto"},
            "steps_per_print": 2**31 - 1,  # DeepSpeed's own progress lines would flood the cell
        }

    def _read_back(self) -> None:
        """Fields the config decides (a JSON's stage, offload, ...) become visible on the plugin."""
        zero = self.deepspeed_config.get("zero_optimization") or {}
        self.zero_stage = int(zero.get("stage", 0)) if isinstance(zero.get("stage", 0), int) else self.zero_stage
        self.offload_optimizer_device = (zero.get("offload_optimizer") or {}).get("device", "none")
        self.offload_param_device = (zero.get("offload_param") or {}).get("device", "none")
        self.zero3_init_flag = bool(self.zero3_init_flag)
        self.zero3_save_16bit_model = bool(zero.get("stage3_gather_16bit_weights_on_model_save",
                                                    self.zero3_save_16bit_model or False))

    @classmethod
    def from_accelerate_config(cls, section: Any) -> DeepSpeedPlugin:
        """The plugin for accelerate's ``deepspeed_config`` mapping (``zero_stage``, ``deepspeed_config_file``...).

        Raises:
            ConfigurationError: every bad key or value at once.
        """
        from notebook_accel.config.deepspeed import plugin_kwargs_from_file

        kwargs, problems = plugin_kwargs_from_file(section)
        if problems:
            raise ConfigurationError("deepspeed_config: invalid settings\n" + "\n".join(f"  - {p}" for p in problems))
        return cls(**kwargs)

    @classmethod
    def from_config(cls, config: Config) -> DeepSpeedPlugin | None:
        """The plugin a run :class:`~notebook_accel.config.Config` asks for: ``None`` unless its
        ``distributed_type`` is ``"DEEPSPEED"``. A ``deepspeed_config_file`` is read here, in the launching process.

        Example:
            >>> config = Config(distributed_type="DEEPSPEED", extra={"deepspeed_config": {"zero_stage": 1}})
            >>> DeepSpeedPlugin.from_config(config).zero_stage
            1
        """
        kwargs = config.deepspeed_plugin_kwargs
        if kwargs is None:
            return None
        if config.gradient_accumulation_steps > 1 and "hf_ds_config" not in kwargs:
            kwargs.setdefault("gradient_accumulation_steps", config.gradient_accumulation_steps)
        return cls(**kwargs)

    def to_json(self) -> str:
        """The fields as JSON, with a JSON file's contents in place of its path (how the launcher carries the
        plugin to its workers, which then need not see the file)."""
        data = asdict(self)
        data.pop("deepspeed_config")
        data["hf_ds_config"] = self.deepspeed_config
        for name in JSON_OWNED:
            data[name] = None  # the config holds them; read back from it again
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DeepSpeedPlugin:
        """The plugin back from :meth:`to_json` (the worker side).

        Raises:
            ConfigurationError: the text is not a JSON object of plugin fields.
        """
        return cls(**fields_from_json(text, tuple(CHECKS), "DeepSpeed", "deepspeed_plugin"))
