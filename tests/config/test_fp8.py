"""The config's fp8: accelerate's ``fp8_config`` section (backend AO), checked with ``mixed_precision: fp8`` only."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from notebook_accel.config import Config, ConfigError, load_config, save_config
from notebook_accel.config.fp8 import asks_for_emulation, options_from_file
from notebook_accel.config.machine import precision_choices
from notebook_accel.hardware import GpuInfo

EMULATED = {"fp8_config": {"backend": "AO", "emulate": True}}


def gpu(capability: tuple[int, int] | None) -> GpuInfo:
    return GpuInfo(0, "GPU", 80 << 30, capability)


def test_accelerates_ao_section_gives_its_switches() -> None:
    section = {"backend": "AO", "enable_fsdp_float8_all_gather": True, "pad_inner_dim": False}
    assert options_from_file(section) == ({"enable_fsdp_float8_all_gather": True, "pad_inner_dim": False}, [])
    assert options_from_file(None) == ({}, []) and options_from_file({}) == ({}, [])
    assert asks_for_emulation(EMULATED) and not asks_for_emulation({})


@pytest.mark.parametrize(("section", "words"), [
    ({"backend": "TE", "fp8_format": "HYBRID"}, ["backend: got 'TE'", "allowed: AO", "fp8_config.fp8_format"]),
    ({"backend": "MSAMP"}, ["MS-AMP"]),
    ({"emulate": "yes"}, ["fp8_config.emulate: got 'yes'", "true or false"]),
    ("AO", ["a mapping such as"]),
])
def test_a_bad_section_is_refused_with_fp8(section: object, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        Config(mixed_precision="fp8", extra={"fp8_config": section})
    for word in words:
        assert word in str(info.value)


def test_fp8_on_the_cpu_needs_emulation_and_deepspeed_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"uses the CPU.*emulate: true"):
        Config(num_processes=2, use_cpu=True, mixed_precision="fp8")
    config = Config(num_processes=2, use_cpu=True, mixed_precision="fp8", extra=EMULATED)
    assert json.loads(config.fp8_options or "") == {"emulate": True}
    with pytest.raises(ConfigError, match="the engine is DEEPSPEED"):
        Config(num_processes=2, distributed_type="DEEPSPEED", mixed_precision="fp8",
               extra={"deepspeed_config": {"zero_stage": 2}})
    assert Config(num_processes=2, mixed_precision="fp8").fp8_options is None  # GPUs: checked at launch


def test_the_section_is_kept_unchecked_without_fp8() -> None:
    config = Config(mixed_precision="bf16", extra={"fp8_config": {"backend": "TE"}})
    assert config.fp8_options is None and config.extra["fp8_config"] == {"backend": "TE"}


def test_an_accelerate_file_with_fp8_loads_without_the_unused_warning(tmp_path: Path) -> None:
    path = tmp_path / "fp8.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\n"
                    "use_cpu: true\nmixed_precision: fp8\nfp8_config:\n  backend: AO\n  emulate: true\n"
                    "  pad_inner_dim: true\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config(path)
    assert json.loads(config.fp8_options or "") == {"emulate": True, "pad_inner_dim": True}
    save_config(config, tmp_path / "again.yaml")
    assert load_config(tmp_path / "again.yaml").extra["fp8_config"] == config.extra["fp8_config"]


def test_fp8_is_offered_on_ada_or_newer_gpus_or_with_emulation() -> None:
    assert "fp8" in precision_choices([gpu((9, 0)), gpu((8, 9))])
    assert "fp8" not in precision_choices([gpu((9, 0)), gpu((8, 0))])
    assert "fp8" not in precision_choices([gpu(None)]) and "fp8" not in precision_choices([])
    assert precision_choices([], fp8_emulated=True) == ["no", "bf16", "fp8"]
