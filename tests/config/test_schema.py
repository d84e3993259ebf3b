"""The Config dataclass: defaults, derived fields, override, and every validation problem."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from notebook_accel.config import Config, ConfigError
from notebook_accel.errors import NotebookAccelError


def test_defaults_are_one_process_no_precision() -> None:
    config = Config()
    assert config.distributed_type == "NO"
    assert (config.num_processes, config.mixed_precision, config.gradient_accumulation_steps) == (1, "no", 1)
    assert config.processes_per_machine == 1
    assert config.effective_batch_size is None


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"num_processes": 2}, "MULTI_GPU"),
        ({"num_processes": 2, "use_cpu": True}, "MULTI_CPU"),
        ({"num_processes": 1, "use_cpu": True}, "NO"),
        ({"num_processes": 2, "num_machines": 2, "main_process_ip": "10.0.0.1"}, "MULTI_GPU"),
    ],
)
def test_distributed_type_is_derived(kwargs: dict[str, Any], expected: str) -> None:
    assert Config(**kwargs).distributed_type == expected


def test_multi_cpu_implies_use_cpu() -> None:
    assert Config(distributed_type="MULTI_CPU", num_processes=2).use_cpu is True


@pytest.mark.parametrize(("given", "normalised"), [(0, "0"), ([0, 1], "0,1"), ((2, 3), "2,3"), (" 0, 1 ", "0,1"),
                                                   ("ALL", "all"), (None, None)])
def test_gpu_ids_forms_are_normalised(given: Any, normalised: str | None) -> None:
    config = Config(gpu_ids=given)
    assert config.gpu_ids == normalised
    assert config.gpu_id_list == (None if normalised in (None, "all") else [int(i) for i in normalised.split(",")])


def test_effective_batch_size_counts_processes_and_accumulation() -> None:
    config = Config(num_processes=4, per_device_batch_size=8, gradient_accumulation_steps=2)
    assert config.effective_batch_size == 64


def test_override_keeps_values_for_none_and_rederives_type() -> None:
    base = Config(num_processes=2, use_cpu=True, mixed_precision="bf16")
    assert base.override(mixed_precision=None, num_processes=None) == base
    one = base.override(num_processes=1)
    assert (one.distributed_type, one.use_cpu, one.mixed_precision) == ("NO", True, "bf16")
    gpu = Config().override(num_processes=2)
    assert gpu.distributed_type == "MULTI_GPU"
    assert Config().override(gradient_accumulation_steps=4).gradient_accumulation_steps == 4


def test_override_rejects_unknown_field_with_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'num_processes'"):
        Config().override(num_proceses=2)


def test_override_validates_the_result() -> None:
    with pytest.raises(ConfigError, match="num_processes"):
        Config().override(num_processes=0)


def test_config_is_frozen_and_hashable_and_extra_not_compared() -> None:
    a = Config(extra={"fsdp_config": {"x": 1}})
    assert a == Config()
    assert hash(a) == hash(Config())
    with pytest.raises(AttributeError):
        a.num_processes = 3  # type: ignore[misc]


# field -> (bad value, words the problem must contain)
BAD_FIELDS: list[tuple[str, Any, list[str]]] = [
    ("compute_environment", "AMAZON_SAGEMAKER", ["compute_environment", "'LOCAL_MACHINE'", "AMAZON_SAGEMAKER"]),
    ("distributed_type", "MEGATRON_LM", ["distributed_type", "'DEEPSPEED'", "does not run"]),
    ("distributed_type", "multi_gpu", ["did you mean 'MULTI_GPU'"]),
    ("num_processes", 0, ["num_processes", "got 0", "from 1 to"]),
    ("num_processes", "2", ["num_processes", "'2' (str)"]),
    ("num_processes", True, ["num_processes", "True (bool)"]),
    ("gpu_ids", "0,x", ["gpu_ids", "'0,x'", "'all'"]),
    ("gpu_ids", "0,0", ["gpu_ids", "distinct"]),
    ("gpu_ids", 1.5, ["gpu_ids", "1.5 (float)"]),
    ("mixed_precision", "fp32", ["mixed_precision", "'fp32'", "'bf16'"]),
    ("mixed_precision", "fp4", ["mixed_precision", "'fp4'", "'fp8'"]),
    ("mixed_precision", "BF16", ["did you mean 'bf16'"]),
    ("gradient_accumulation_steps", 0, ["gradient_accumulation_steps", "from 1 to"]),
    ("per_device_batch_size", -1, ["per_device_batch_size", "or null"]),
    ("num_machines", 0, ["num_machines", "from 1 to"]),
    ("machine_rank", -1, ["machine_rank", "from 0 to"]),
    ("main_process_ip", "", ["main_process_ip", "host name"]),
    ("main_process_ip", "10.0 .0.1", ["main_process_ip"]),
    ("main_process_port", 70000, ["main_process_port", "70000", "1-65535"]),
    ("rdzv_backend", "tcp", ["rdzv_backend", "'c10d'"]),
    ("same_network", "maybe", ["same_network", "true or false"]),
    ("use_cpu", 1, ["use_cpu", "true or false"]),
    ("downcast_bf16", None, ["downcast_bf16"]),
    ("debug", "yes", ["debug"]),
    ("enable_cpu_affinity", [], ["enable_cpu_affinity"]),
    ("main_training_function", "not a name", ["main_training_function", "'not a name'"]),
    ("main_training_function", "class", ["main_training_function"]),
]


@pytest.mark.parametrize(("field", "value", "words"), BAD_FIELDS, ids=[f"{f}={v!r}" for f, v, _ in BAD_FIELDS])
def test_each_bad_field_is_one_named_problem(field: str, value: Any, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        Config(**{field: value})
    assert len(info.value.problems) == 1, info.value.problems
    for word in words:
        assert word in info.value.problems[0], info.value.problems[0]


BAD_COMBINATIONS: list[tuple[dict[str, Any], str]] = [
    ({"distributed_type": "NO", "num_processes": 2}, "'NO' does not fit num_processes=2"),
    ({"distributed_type": "MULTI_GPU", "use_cpu": True, "num_processes": 2}, "use_cpu: true does not fit"),
    ({"mixed_precision": "fp16", "use_cpu": True}, "'fp16' needs a GPU"),
    ({"num_processes": 3, "num_machines": 2, "main_process_ip": "h"}, "cannot be split evenly"),
    ({"machine_rank": 2, "num_machines": 2, "num_processes": 2, "main_process_ip": "h"}, "allowed: 0 to 1"),
    ({"num_machines": 2, "num_processes": 2}, "main_process_ip: required"),
    ({"gpu_ids": "0", "num_processes": 2}, "lists 1 GPU(s) but each machine runs 2"),
    ({"extra": {"deepspeed_confg": {}}}, "did you mean 'deepspeed_config'"),
    ({"extra": {"fsdp_config": {"x": object()}}}, "cannot be saved to YAML"),
    ({"extra": ["fsdp_config"]}, "extra: got list"),
]


@pytest.mark.parametrize(("kwargs", "words"), BAD_COMBINATIONS, ids=[w for _, w in BAD_COMBINATIONS])
def test_each_bad_combination_is_a_problem(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config(**kwargs)
    assert any(words in p for p in info.value.problems), info.value.problems


def test_gpu_ids_on_cpu_are_not_counted() -> None:
    assert Config(gpu_ids="0", num_processes=2, use_cpu=True).num_processes == 2


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        Config(num_processes=0, mixed_precision="fp32", main_process_port=-1, rdzv_backend="x")
    assert len(info.value.problems) == 4
    message = str(info.value)
    assert message.startswith("invalid notebook-accel config: 4 problems")
    assert all(p in message for p in info.value.problems)


def test_a_broken_field_does_not_cascade() -> None:
    with pytest.raises(ConfigError) as info:
        Config(num_processes="two", num_machines=2, main_process_ip="h")
    assert len(info.value.problems) == 1


def test_config_error_types_and_pickling() -> None:
    error = ConfigError(["a: bad", "b: bad"], "file.yaml")
    assert isinstance(error, NotebookAccelError) and isinstance(error, ValueError)
    again = pickle.loads(pickle.dumps(error))
    assert again.problems == error.problems and again.source == "file.yaml"
    assert "in file.yaml: 2 problems" in str(again)


def test_config_pickles_with_its_extra_settings() -> None:
    config = Config(num_processes=2, use_cpu=True, extra={"fsdp_config": {"a": 1}})
    again = pickle.loads(pickle.dumps(config))
    assert again == config and again.extra == {"fsdp_config": {"a": 1}}
