"""Tests for notebook_accel.environment: the one module that reads and writes environment variables."""

from __future__ import annotations

import os

import pytest

from notebook_accel import environment
from notebook_accel.environment import LaunchEnvironment, cuda_visible_devices, patched_environ


def test_defaults_describe_a_single_process() -> None:
    env = LaunchEnvironment.from_environ({})
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (0, 0, 1, 1)
    assert not env.is_distributed and not env.launched
    assert env.device is None and env.mixed_precision is None


def test_round_trip_through_environ() -> None:
    env = LaunchEnvironment(
        rank=1, local_rank=1, world_size=2, local_world_size=2, master_addr="127.0.0.1", master_port=29511,
        device="cpu", mixed_precision="bf16", gradient_accumulation_steps=4, launched=True,
    )
    assert LaunchEnvironment.from_environ(env.to_environ()) == env


def test_torchrun_style_environment() -> None:
    env = LaunchEnvironment.from_environ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 1, 4, 2)


def test_bad_integer_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"WORLD_SIZE='two'"):
        LaunchEnvironment.from_environ({"WORLD_SIZE": "two"})


def test_apply_removes_stale_launch_variables() -> None:
    target = {"NOTEBOOK_ACCEL_MIXED_PRECISION": "fp16", "PATH": "/bin"}
    LaunchEnvironment(rank=0, world_size=1).apply(target)
    assert "NOTEBOOK_ACCEL_MIXED_PRECISION" not in target and target["PATH"] == "/bin"
    assert target["WORLD_SIZE"] == "1"


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), ("", []), ("0,1", ["0", "1"]), (" 2 , 3,", ["2", "3"]), ("GPU-ab", ["GPU-ab"])]
)
def test_cuda_visible_devices(value: str | None, expected: list[str] | None) -> None:
    environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert cuda_visible_devices(environ) == expected


def test_patched_environ_restores() -> None:
    os.environ.pop("NA_TEST_X", None)
    os.environ["NA_TEST_Y"] = "keep"
    try:
        with patched_environ({"NA_TEST_X": "1", "NA_TEST_Y": None}):
            assert os.environ["NA_TEST_X"] == "1" and "NA_TEST_Y" not in os.environ
        assert "NA_TEST_X" not in os.environ and os.environ["NA_TEST_Y"] == "keep"
    finally:
        os.environ.pop("NA_TEST_Y", None)


def test_one_engine_variable_becomes_the_engine_and_two_are_refused_naming_both() -> None:
    env = LaunchEnvironment.from_environ({"NOTEBOOK_ACCEL_FSDP": '{"sharding_strategy": "FULL_SHARD"}'})
    assert env.engine is not None and env.engine.name == "FSDP" and env.engine.variable == "NOTEBOOK_ACCEL_FSDP"
    assert LaunchEnvironment.from_environ(env.to_environ()) == env
    with pytest.raises(ValueError, match="NOTEBOOK_ACCEL_FSDP and NOTEBOOK_ACCEL_DEEPSPEED are both set"):
        LaunchEnvironment.from_environ({"NOTEBOOK_ACCEL_FSDP": "{}", "NOTEBOOK_ACCEL_DEEPSPEED": "{}"})


def test_what_an_import_for_the_workers_sets_is_undone_here_and_set_in_a_worker_unless_changed_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = environment.IMPORT_VARIABLES[0]
    monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(environment, "_import_effects", {})
    with environment.imports_for_workers():
        os.environ[name] = "/set/by/an/import"
    assert name not in os.environ  # the kernel's environment as it was
    environment.apply_import_effects()  # what a worker does: as if it had imported the module itself
    assert os.environ[name] == "/set/by/an/import"
    monkeypatch.setenv(name, "/chosen/by/the/user/since")
    environment.apply_import_effects()
    assert os.environ[name] == "/chosen/by/the/user/since"


def test_accelerates_mixed_precision_name_is_written_and_read() -> None:
    """Workers get ACCELERATE_MIXED_PRECISION beside ours (accelerate 1.16's launchers set it and its scripts
    check it); an environment with only accelerate's name (``accelerate launch``, a user's export) is honoured, and
    ours wins when both are set."""
    written = LaunchEnvironment(mixed_precision="fp16").to_environ()
    assert written["ACCELERATE_MIXED_PRECISION"] == written["NOTEBOOK_ACCEL_MIXED_PRECISION"] == "fp16"
    assert "MIXED_PRECISION" not in written and "ACCELERATE_MIXED_PRECISION" not in LaunchEnvironment().to_environ()
    assert LaunchEnvironment.from_environ({"ACCELERATE_MIXED_PRECISION": "bf16"}).mixed_precision == "bf16"
    both = {"ACCELERATE_MIXED_PRECISION": "bf16", "NOTEBOOK_ACCEL_MIXED_PRECISION": "no"}
    assert LaunchEnvironment.from_environ(both).mixed_precision == "no"
    assert environment.launch_choices(mixed_precision="bf16")["ACCELERATE_MIXED_PRECISION"] == "bf16"
