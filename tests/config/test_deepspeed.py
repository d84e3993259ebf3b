"""The DeepSpeed settings table and ``distributed_type: DEEPSPEED`` config files (no deepspeed import needed)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from notebook_accel.config import Config, ConfigError, load_config
from notebook_accel.config.deepspeed import check_fields, cross_field_problems, plugin_kwargs_from_file
from notebook_accel.config.files import MAX_CONFIG_BYTES
from tests.engines.deepspeed.files import HEADER, ZERO2

def test_an_accelerate_zero2_file_loads_without_warnings(tmp_path: Path) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(ZERO2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config(path)
    assert config.distributed_type == "DEEPSPEED"
    assert config.deepspeed_plugin_kwargs == {
        "gradient_accumulation_steps": 1, "gradient_clipping": 0.5, "offload_optimizer_device": "none",
        "offload_param_device": "none", "zero3_init_flag": False, "zero_stage": 2}


def test_a_config_file_path_is_read_and_its_json_checked(tmp_path: Path) -> None:
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}))
    kwargs, problems = plugin_kwargs_from_file({"deepspeed_config_file": str(good), "zero3_init_flag": True})
    assert problems == [] and kwargs == {"hf_ds_config": str(good), "zero3_init_flag": True}
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    _, problems = plugin_kwargs_from_file({"deepspeed_config_file": str(broken)})
    assert len(problems) == 1 and "not valid JSON" in problems[0] and "broken.json" in problems[0]
    _, problems = plugin_kwargs_from_file({"deepspeed_config_file": str(tmp_path / "missing.json")})
    assert "cannot read the DeepSpeed JSON" in problems[0] and "missing.json" in problems[0]


def _special(kind: str, tmp_path: Path) -> str:
    """A path that is no JSON file: a device that never ends, a FIFO with no writer, a folder, a 2 GiB file."""
    if kind == "device":
        return "/dev/zero"
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as f:
            f.truncate(2 << 30)  # sparse: no disk used
    return str(path)


_WHY = {"device": "not a regular file (a device, pipe or socket); give the path of a DeepSpeed JSON file",
        "fifo": "not a regular file (a device, pipe or socket); give the path of a DeepSpeed JSON file",
        "folder": "is a folder",
        "huge": f"the file has {2 << 30} bytes; a DeepSpeed JSON file is at most {MAX_CONFIG_BYTES} bytes"}


@pytest.mark.timeout(60)  # a hang guard: reading /dev/zero or opening a FIFO without a writer never ended
@pytest.mark.parametrize("kind", ["device", "fifo", "folder", "huge"])
def test_a_deepspeed_config_file_that_is_not_a_json_file_is_refused_at_once(kind: str, tmp_path: Path) -> None:
    path = _special(kind, tmp_path)
    _, problems = plugin_kwargs_from_file({"deepspeed_config_file": path})
    assert problems == [f"deepspeed_config.deepspeed_config_file: cannot read the DeepSpeed JSON {path!r} "
                        f"({_WHY[kind]}); check the path"]
    config = tmp_path / "ds.yaml"
    config.write_text(HEADER + f"deepspeed_config:\n  deepspeed_config_file: {path}\n")
    with pytest.raises(ConfigError, match="cannot read the DeepSpeed JSON"):
        load_config(config)


def test_every_problem_is_reported_at_once_with_the_file_key() -> None:
    section = {"zero_stag": 2, "zero_stage": 5, "offload_optimizer_device": "nvme", "gradient_clipping": -1,
               "zero3_init_flag": "maybe", "deepspeed_moe_layer_cls_names": "Not A Class"}
    with pytest.raises(ConfigError) as info:
        Config(distributed_type="DEEPSPEED", extra={"deepspeed_config": section})
    problems = info.value.problems
    assert len(problems) == 6
    text = "\n".join(problems)
    assert "deepspeed_config.zero_stag: unknown DeepSpeed setting; did you mean 'zero_stage'?" in text
    assert "deepspeed_config.zero_stage: got 5 (int); allowed: 0 (no sharding)" in text
    assert "deepspeed_config.offload_optimizer_device: got 'nvme'" in text and "use 'cpu'" in text
    assert "deepspeed_config.gradient_clipping: got -1 (int); allowed: a number >= 0" in text
    assert "deepspeed_config.zero3_init_flag: got 'maybe' (str); allowed: true or false" in text
    assert "deepspeed_config.deepspeed_moe_layer_cls_names: got 'Not A Class'" in text


def test_forgiving_forms_become_canonical() -> None:
    kwargs, problems = check_fields({"zero_stage": "3", "offload_param_device": "CPU", "offload_optimizer_device": None,
                                     "transformer_moe_cls_names": "A, B", "gradient_clipping": 1})
    assert problems == {}
    assert kwargs == {"zero_stage": 3, "offload_param_device": "cpu", "offload_optimizer_device": None,
                      "transformer_moe_cls_names": ["A", "B"], "gradient_clipping": 1.0}
    assert plugin_kwargs_from_file({"offload_param_device": False, "zero3_save_16bit_model": "true"})[0] == {
        "offload_param_device": "none", "zero3_save_16bit_model": True}


def test_offload_rules_across_fields() -> None:
    problems = cross_field_problems({"zero_stage": 2, "offload_param_device": "cpu"}, set())
    assert "parameter offload needs zero_stage 3" in problems["offload_param_device"]
    problems = cross_field_problems({"zero_stage": 0, "offload_optimizer_device": "cpu"}, set())
    assert "optimizer offload needs zero_stage 1, 2 or 3" in problems["offload_optimizer_device"]
    assert cross_field_problems({"zero_stage": 3, "offload_param_device": "cpu",
                                 "offload_optimizer_device": "cpu"}, set()) == {}


def test_settings_the_json_owns_are_refused_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text("{}")
    _, problems = plugin_kwargs_from_file({"deepspeed_config_file": str(path), "zero_stage": 2,
                                           "gradient_clipping": 1.0, "offload_param_device": "none"})
    assert len(problems) == 2
    assert all("set it in the JSON instead" in p for p in problems)
    assert {p.split(":")[0] for p in problems} == {"deepspeed_config.zero_stage", "deepspeed_config.gradient_clipping"}


def test_a_section_that_is_not_a_mapping_and_launcher_keys() -> None:
    assert "allowed: a mapping of DeepSpeed settings" in plugin_kwargs_from_file(["zero_stage"])[1][0]
    kwargs, problems = plugin_kwargs_from_file({"deepspeed_multinode_launcher": "standard", "zero_stage": 1})
    assert problems == [] and kwargs == {"zero_stage": 1}


def test_deepspeed_config_is_kept_but_unused_for_other_types(tmp_path: Path) -> None:
    path = tmp_path / "ddp.yaml"
    path.write_text("num_processes: 2\nuse_cpu: true\ndeepspeed_config:\n  zero_stage: 9\n")
    with pytest.warns(UserWarning, match="deepspeed_config"):
        config = load_config(path)
    assert config.deepspeed_plugin_kwargs is None


def test_override_keeps_deepspeed_when_the_topology_changes() -> None:
    config = Config(distributed_type="DEEPSPEED", num_processes=2, use_cpu=True)
    assert config.override(num_processes=4).distributed_type == "DEEPSPEED"
