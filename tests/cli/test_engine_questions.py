"""``notebook-accel config``'s engine questions, answered through a patched ``input``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from notebook_accel.cli.common import UsageError
from notebook_accel.cli.config_cmd import interview
from notebook_accel.config import load_config, save_config

# machines, port, processes, precision, accumulation (every question before the engine's, on a CPU machine)
COMMON = ["", "", "2", "", ""]


def answer(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> list[str]:
    """Feed ``answers`` to ``input``; returns the prompts asked (an exhausted list ends the input)."""
    prompts: list[str] = []
    lines: Iterator[str] = iter(answers)

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    return prompts


def test_fsdp_answers_write_accelerates_keys(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             tmp_path: object) -> None:
    fsdp = ["fsdp", "FULL_SHRD", "1", "", "LlamaDecoderLayer", "", "no", "yes", "true", ""]
    prompts = answer(monkeypatch, COMMON + fsdp)
    config = interview([], 4)
    out = capsys.readouterr().out
    assert "did you mean 'FULL_SHARD'?" in out and "'HYBRID_SHARD'" in out  # the table's own words
    assert config.distributed_type == "FSDP"
    assert config.extra["fsdp_config"] == {
        "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False,
        "fsdp_activation_checkpointing": True, "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_backward_prefetch": "BACKWARD_PRE"}
    assert not any("Min. parameters" in p for p in prompts)  # size-based wrapping only
    assert config.fsdp_plugin_kwargs is not None and config.fsdp_plugin_kwargs["activation_checkpointing"] is True


def test_size_based_wrap_asks_for_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    answer(monkeypatch, COMMON + ["FSDP", "", "size_based_wrap", "-1", "1000", "", "", "", "", ""])
    config = interview([], 4)
    assert config.extra["fsdp_config"]["fsdp_min_num_params"] == 1000
    assert config.extra["fsdp_config"]["fsdp_auto_wrap_policy"] == "SIZE_BASED_WRAP"


def test_deepspeed_answers_and_cross_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    ds = ["deepspeed", "", "3", "cpu", "nvme", "cpu", "1.0", "", "yes"]
    answer(monkeypatch, COMMON + ds)
    config = interview([], 4)
    assert config.distributed_type == "DEEPSPEED"
    assert config.extra["deepspeed_config"] == {
        "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu", "gradient_clipping": 1.0,
        "zero3_init_flag": False, "zero3_save_16bit_model": True}


def test_deepspeed_json_skips_what_it_owns(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    import pathlib

    json_file = pathlib.Path(str(tmp_path)) / "ds.json"
    json_file.write_text('{"zero_optimization": {"stage": 2}}')
    prompts = answer(monkeypatch, COMMON + ["deepspeed", str(tmp_path) + "/missing.json", str(json_file), ""])
    config = interview([], 4)
    assert config.extra["deepspeed_config"] == {"deepspeed_config_file": str(json_file), "zero3_init_flag": False}
    assert not any("ZeRO stage" in p for p in prompts)
    saved = save_config(config, pathlib.Path(str(tmp_path)) / "c.yaml")
    assert load_config(saved).extra["deepspeed_config"] == config.extra["deepspeed_config"]


def test_one_process_asks_no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = answer(monkeypatch, ["", "", "1", "", ""])
    assert interview([], 4).distributed_type == "NO"
    assert not any("Engine" in p for p in prompts)


def test_a_wrong_engine_name_is_asked_again_and_input_end_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    answer(monkeypatch, COMMON + ["zero"])
    with pytest.raises(UsageError, match="input ended before the question 'Engine"):
        interview([], 4)
