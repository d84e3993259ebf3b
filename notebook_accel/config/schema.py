"""The config model: one frozen dataclass, validated when built.

Field names are those of accelerate's config file where the two overlap, so a file written by
``accelerate config`` loads (see :mod:`notebook_accel.config.accelerate_keys`); ``gradient_accumulation_steps`` and
``per_device_batch_size`` are ours. ``num_processes`` counts every process on every machine, as in accelerate;
:attr:`Config.processes_per_machine` is the share of one machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from notebook_accel.cluster import Cluster, check_cluster
from notebook_accel.config import deepspeed as _deepspeed
from notebook_accel.config import fsdp as _fsdp
from notebook_accel.config.fp8 import FP8_SECTION, fp8_config_problems, fp8_options_json
from notebook_accel.config.accelerate_keys import UNSUPPORTED_KEYS, unknown_key_problem
from notebook_accel.config.choices import ComputeEnvironment, DistributedType, MixedPrecision, RdzvBackend
from notebook_accel.config.errors import ConfigError
from notebook_accel.config.validation import cross_problems, field_problems, parse_gpu_ids
from notebook_accel.errors import LaunchError

__all__ = ["Config", "FIELD_NAMES", "OUR_FIELDS"]

#: Fields that accelerate's file does not have; saved only when they differ from the default, so a file
#: with default values stays readable by ``accelerate launch``.
OUR_FIELDS = ("gradient_accumulation_steps", "per_device_batch_size")

_TOPOLOGY = ("num_processes", "num_machines", "use_cpu")

#: distributed types that name an engine -> (their accelerate section, its checker returning (kwargs, problems)).
_ENGINEOWN_SECTIONS: dict[str, tuple[str, Callable[[Any], tuple[dict[str, Any], list[str]]]]] = {
    "FSDP": ("fsdp_config", _fsdp.plugin_kwargs_from_file),
    "DEEPSPEED": ("deepspeed_config", _deepspeed.plugin_kwargs_from_file),
}


@dataclass(frozen=True)
class Config:
    """How to run: processes, devices, precision, accumulation and machines.

    Built from keyword arguments, a YAML file (:func:`~notebook_accel.config.load_config`), the config picker
    widget or the command line. Construction validates every field and raises one :class:`ConfigError` listing
    every problem.

    Attributes:
        compute_environment: always ``"LOCAL_MACHINE"`` (accelerate's name).
        distributed_type: ``"NO"`` (one process), ``"MULTI_CPU"`` or ``"MULTI_GPU"``; ``None`` (the default)
            is replaced by the type that ``num_processes``, ``num_machines`` and ``use_cpu`` imply.
            ``"MULTI_CPU"`` implies ``use_cpu=True``. ``"FSDP"`` shards the model with torch's ``fully_shard``
            as ``extra["fsdp_config"]`` (accelerate's section) says; see :attr:`fsdp_plugin_kwargs`.
            ``"DEEPSPEED"`` trains with DeepSpeed ZeRO as ``extra["deepspeed_config"]`` says; see
            :attr:`deepspeed_plugin_kwargs`.
        num_processes: processes in total, over all machines (accelerate's meaning).
        gpu_ids: ``"all"``, ``"0,1"`` (an integer or a list of integers is normalised to that form) or ``None``
            (every visible GPU).
        mixed_precision: ``"no"``, ``"fp16"`` (GPU only), ``"bf16"`` or ``"fp8"`` (torchao float8: a GPU of
            compute capability 8.9 or newer, unless ``extra["fp8_config"]`` asks for ``emulate: true``).
        gradient_accumulation_steps: batches per optimizer step (ours; reaches the workers' Accelerator).
        per_device_batch_size: batch size of one process, used to show the effective batch size (ours).
        num_machines, machine_rank: how many machines take part and which one this is (0 is the main one).
        main_process_ip, main_process_port: rendezvous address of machine 0; port 0 or ``None`` picks a free
            port on a single machine.
        rdzv_backend: torch.distributed.run's rendezvous backend (``"static"`` or ``"c10d"``, ...).
        same_network, use_cpu, downcast_bf16, debug, main_training_function, enable_cpu_affinity: accelerate's
            settings of the same names.
        extra: accelerate settings notebook-accel keeps but does not use (``deepspeed_config``, TPU fields,
            ``fsdp_config`` unless ``distributed_type`` is ``"FSDP"``, ...); written back on save. Not part of
            equality or hashing (``fsdp_config`` is validated when ``distributed_type`` is ``"FSDP"``,
            ``deepspeed_config`` when it is ``"DEEPSPEED"``).

    Raises:
        ConfigError: with every problem found.

    Example:
        >>> config = Config(num_processes=2, use_cpu=True, mixed_precision="bf16")
        >>> config.distributed_type
        'MULTI_CPU'
        >>> config.override(num_processes=4, mixed_precision=None).num_processes   # None: keep the value
        4
    """

    compute_environment: ComputeEnvironment = "LOCAL_MACHINE"
    distributed_type: DistributedType | None = None
    num_processes: int = 1
    gpu_ids: str | None = None
    mixed_precision: MixedPrecision = "no"
    gradient_accumulation_steps: int = 1
    per_device_batch_size: int | None = None
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: RdzvBackend = "static"
    same_network: bool = True
    use_cpu: bool = False
    downcast_bf16: bool = False
    debug: bool = False
    main_training_function: str = "main"
    enable_cpu_affinity: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        """Normalise the forgiving forms (gpu_ids as int/list, derived distributed_type), then validate."""
        set_ = object.__setattr__
        set_(self, "gpu_ids", _normalise_gpu_ids(self.gpu_ids))
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        problems = field_problems(values)
        bad = set(problems)
        if not bad.intersection(("distributed_type", *_TOPOLOGY)):
            if self.distributed_type is None:
                set_(self, "distributed_type", _derive_type(self.num_processes, self.num_machines, self.use_cpu))
            if self.distributed_type == "MULTI_CPU":
                set_(self, "use_cpu", True)
            values.update(distributed_type=self.distributed_type, use_cpu=self.use_cpu)
        elif self.distributed_type is None:
            bad.add("distributed_type")
        found = list(problems.values()) + cross_problems(values, bad)
        found += _extra_problems(self.extra)
        if isinstance(self.extra, dict) and not bad.intersection(("mixed_precision", "use_cpu")):
            found += fp8_config_problems(self.mixed_precision, self.extra.get(FP8_SECTION), self.use_cpu,
                                         self.distributed_type)
        section = _ENGINEOWN_SECTIONS.get(self.distributed_type) if isinstance(self.distributed_type, str) else None
        if section is not None and isinstance(self.extra, dict):
            found += section[1](self.extra.get(section[0]))[1]
        if found:
            raise ConfigError(found)
        set_(self, "extra", dict(self.extra))

    @property
    def processes_per_machine(self) -> int:
        """Processes started on each machine (``num_processes // num_machines``)."""
        return self.num_processes // self.num_machines

    @property
    def gpu_id_list(self) -> list[int] | None:
        """``gpu_ids`` as a list of indices, or ``None`` for every visible GPU."""
        return None if self.gpu_ids is None else parse_gpu_ids(self.gpu_ids)

    @property
    def effective_batch_size(self) -> int | None:
        """Samples per optimizer step over the whole run, or ``None`` without ``per_device_batch_size``."""
        if self.per_device_batch_size is None:
            return None
        return self.per_device_batch_size * self.num_processes * self.gradient_accumulation_steps

    @property
    def fsdp_plugin_kwargs(self) -> dict[str, Any] | None:
        """With ``distributed_type: FSDP``, the ``FullyShardedDataParallelPlugin`` arguments its ``fsdp_config``
        asks for (accelerate's file keys turned into the plugin's fields); ``None`` for every other type."""
        if self.distributed_type != "FSDP":
            return None
        return _fsdp.plugin_kwargs_from_file(self.extra.get("fsdp_config"))[0]

    @property
    def deepspeed_plugin_kwargs(self) -> dict[str, Any] | None:
        """With ``distributed_type: DEEPSPEED``, the ``DeepSpeedPlugin`` arguments its ``deepspeed_config`` asks
        for (accelerate's file keys turned into the plugin's fields); ``None`` for every other type."""
        if self.distributed_type != "DEEPSPEED":
            return None
        return _deepspeed.plugin_kwargs_from_file(self.extra.get("deepspeed_config"))[0]

    @property
    def cluster(self) -> Cluster | None:
        """Where the workers run when not on this machine: the ``cluster:`` section (``kind: ray``, ``address``,
        ``resources_per_worker``, ``placement``, ...), checked; ``None`` without one (ours; accelerate has none)."""
        return check_cluster(self.extra.get("cluster"))

    @property
    def fp8_options(self) -> str | None:
        """With ``mixed_precision: fp8``, the switches of its ``fp8_config`` as JSON (``{"emulate": true}``), for the
        workers' Accelerators; ``None`` otherwise, or when the section sets none."""
        return fp8_options_json(self.mixed_precision, self.extra.get(FP8_SECTION))

    def override(self, **changes: Any) -> Config:
        """A copy with the given fields changed; a ``None`` value means "not given" and keeps the current value.

        This is the precedence rule of the launcher and the CLI: explicit arguments win over the config. When
        the process count, machine count or ``use_cpu`` changes and ``distributed_type`` is not given, the type
        is derived again.

        Raises:
            ConfigError: an unknown field name, or a resulting config that is invalid.
        """
        known = {f.name for f in dataclasses.fields(self)}
        unknown = [unknown_key_problem(k, known) for k in changes if k not in known]
        if unknown:
            raise ConfigError(unknown)
        given = {k: v for k, v in changes.items() if v is not None}
        if "distributed_type" not in given and given.keys() & set(_TOPOLOGY) \
                and self.distributed_type not in _ENGINEOWN_SECTIONS:
            given["distributed_type"] = None  # use_cpu still says whether a MULTI_CPU config stays on CPU
        return dataclasses.replace(self, **given)


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config) if f.name != "extra")
OWN_SECTIONS = ("cluster",)  # our own sections of the file, kept in ``extra`` (accelerate ignores them)


def _normalise_gpu_ids(value: Any) -> Any:
    """``0`` -> ``"0"``; ``[0, 1]`` -> ``"0,1"``; ``" 0, 1 "`` -> ``"0,1"``; anything else unchanged."""
    if type(value) is int and value.bit_length() <= 64:  # a larger number is no device index: validation says so
        return str(value)
    if isinstance(value, (list, tuple)) and value and all(type(v) is int and v.bit_length() <= 64 for v in value):
        return ",".join(str(v) for v in value)
    if isinstance(value, str):
        return ",".join(p.strip() for p in value.split(",")) if value.strip().lower() != "all" else "all"
    return value


def _derive_type(num_processes: int, num_machines: int, use_cpu: bool) -> DistributedType:
    """The distributed type implied by the topology."""
    if num_processes == 1 and num_machines == 1:
        return "NO"
    return "MULTI_CPU" if use_cpu else "MULTI_GPU"


def _extra_problems(extra: Any) -> list[str]:
    """Problems with ``extra``: it must map known accelerate setting names to plain YAML values."""
    if not isinstance(extra, dict):
        return [f"extra: got {type(extra).__name__}; allowed: a dict of accelerate settings"]
    out = [unknown_key_problem(k, (*FIELD_NAMES, *OWN_SECTIONS)) for k in extra
           if k not in UNSUPPORTED_KEYS and k not in OWN_SECTIONS]
    out += [f"{k}: value {type(v).__name__} cannot be saved to YAML; use plain values" for k, v in extra.items()
            if (k in UNSUPPORTED_KEYS or k in OWN_SECTIONS) and not _plain(v)]
    if "cluster" in extra:
        try:
            check_cluster(extra["cluster"])
        except LaunchError as e:
            out.append(f"cluster: {e}")
    return out


def _plain(value: Any, depth: int = 0) -> bool:
    """True for YAML-safe data: None, bool, int, float, str, and lists/dicts of them (bounded depth)."""
    if depth > 50:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False
