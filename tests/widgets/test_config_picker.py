"""The config picker, headless: set control values, check .config and the inline messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from notebook_accel import hardware
from notebook_accel.config import Config, ConfigError, load_config, resolve_config, save_config
from notebook_accel.hardware import GpuInfo
from notebook_accel.widgets.config_picker import ConfigPicker
from notebook_accel.widgets.engine_section import AUTOMATIC

A100 = [GpuInfo(i, "NVIDIA A100-SXM4-80GB", 80 * 2**30, (8, 0)) for i in range(2)]
T4 = [GpuInfo(0, "Tesla T4", 15 * 2**30, (7, 5))]


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the user's real config files out of the picker's default lookup."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("NOTEBOOK_ACCEL_CONFIG_FILE", raising=False)


def test_cpu_machine_defaults_to_one_cpu_process() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    assert picker.config == Config(num_processes=1, use_cpu=True)
    assert picker.device.options == ("CPU",)
    assert list(picker.mixed_precision.options) == ["no", "bf16"]
    assert picker.process_limit == 4
    assert "4 cores" in picker.hardware_info.value and "none detected" in picker.hardware_info.value
    assert picker.problems == [] and "✓ 1 process(es) on CPU" in picker.message.value


def test_gpu_machine_shows_gpus_and_uses_all_of_them() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100)
    assert "NVIDIA A100-SXM4-80GB, 80.0 GiB" in picker.hardware_info.value
    config = picker.config
    assert (config.num_processes, config.gpu_ids, config.distributed_type) == (2, "all", "MULTI_GPU")
    assert list(picker.mixed_precision.options) == ["no", "fp16", "bf16"]


def test_processes_are_bounded_by_the_selected_gpus() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100)
    picker.processes.value = 5  # typed: kept as typed and refused with the reason, never snapped back silently
    assert picker.processes.value == 5
    assert picker.problems == ["processes per machine: 5 is more than the chosen devices allow (2 GPU(s) chosen); "
                               "use 1 to 2"]
    assert "5 is more than the chosen devices allow" in picker.message.value
    picker.processes.value = 2
    picker.gpus.value = (1,)  # fewer devices: the count follows, and the form says so
    assert picker.process_limit == 1 and picker.processes.value == 1
    assert "processes per machine: 2 → 1, the most the chosen devices allow" in picker.message.value
    assert (picker.config.gpu_ids, picker.config.num_processes) == ("1", 1)


def test_precision_choices_follow_the_hardware() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=T4)
    assert list(picker.mixed_precision.options) == ["no", "fp16"]  # no bf16 before compute capability 8.0
    picker.mixed_precision.value = "fp16"
    picker.device.value = "CPU"
    assert list(picker.mixed_precision.options) == ["no", "bf16"]
    assert picker.mixed_precision.value == "no"  # fp16 is not offered on CPU
    assert picker.config.use_cpu and picker.config.mixed_precision == "no"


def test_effective_batch_size_is_shown() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100)
    assert "set a batch size" in picker.effective.value
    picker.batch_size.value = 16
    picker.accumulation.value = 4
    assert picker.config.effective_batch_size == 128
    assert "<b>128</b> = 16 per device × 2 processes × 4 accumulation steps" in picker.effective.value


def test_invalid_combinations_show_messages_instead_of_raising() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100)
    picker.machines.value = 2  # no address of the main machine, port 0
    picker.machine_rank.value = 3
    problems = picker.problems
    assert any("main_process_ip: required" in p for p in problems)
    assert any("machine_rank: got 3" in p for p in problems)
    assert any("port: 0" in p for p in problems)
    assert "⚠" in picker.message.value and "main_process_ip" in picker.message.value
    with pytest.raises(ConfigError) as info:
        picker.config  # noqa: B018
    assert info.value.problems == problems
    picker.main_ip.value = "10.0.0.1"
    picker.port.value = 29500
    picker.machine_rank.value = 1
    config = picker.config
    assert (config.num_processes, config.num_machines, config.machine_rank) == (4, 2, 1)
    assert picker.problems == []


def test_no_gpu_selected_is_a_message() -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100)
    picker.gpus.value = ()
    assert picker.problems == ["GPUs: select at least one GPU, or choose CPU"]


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    picker = ConfigPicker(cpu_count=8, gpus=A100, path=tmp_path / "c.yaml")
    picker.mixed_precision.value = "bf16"
    picker.accumulation.value = 2
    picker.save_button.click()
    assert load_config(tmp_path / "c.yaml") == picker.config
    assert picker.messages == [f"saved to {tmp_path / 'c.yaml'}"]
    other = ConfigPicker(cpu_count=8, gpus=A100, path=tmp_path / "c.yaml")
    other.load_button.click()
    assert other.config == picker.config
    assert other.messages[0] == f"loaded {tmp_path / 'c.yaml'}"


def test_load_keeps_fields_the_form_does_not_show(tmp_path: Path) -> None:
    path = save_config(Config(num_processes=2, use_cpu=True, rdzv_backend="c10d", debug=True,
                              extra={"fsdp_config": {}}), tmp_path / "c.yaml")
    picker = ConfigPicker(path, cpu_count=4, gpus=[])
    assert (picker.config.rdzv_backend, picker.config.debug, picker.config.extra) == ("c10d", True, {"fsdp_config": {}})


def test_loading_a_bigger_machines_config_adjusts_with_notes(tmp_path: Path) -> None:
    path = save_config(Config(num_processes=8, gpu_ids="0,1,2,3,4,5,6,7", mixed_precision="fp16"), tmp_path / "c.yaml")
    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.load(path)
    notes = " | ".join(picker.messages)
    assert "asks for GPUs but none was detected" in notes
    assert "8 processes per machine asked, 2 possible here" in notes
    assert "'fp16' is not supported here" in notes
    assert picker.config == Config(num_processes=2, use_cpu=True)


def test_loading_missing_gpus_leaves_them_out(tmp_path: Path) -> None:
    path = save_config(Config(num_processes=1, gpu_ids="1,5"), tmp_path / "c.yaml")
    picker = ConfigPicker(path, cpu_count=2, gpus=A100)
    assert picker.config.gpu_ids == "1"


def test_bad_file_on_the_load_button_is_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_process: 2\n")
    picker = ConfigPicker(cpu_count=2, gpus=[], path=bad)
    picker.load_button.click()
    assert any("load failed" in m and "did you mean 'num_processes'" in m for m in picker.messages)
    assert picker.config == Config(num_processes=1, use_cpu=True)  # the form is unchanged
    with pytest.raises(ConfigError):
        picker.load()
    picker.path.value = " "
    picker.save_button.click()
    assert picker.messages == ["save failed: file: no path given; type one in the File field"]


def test_invalid_form_cannot_be_saved(tmp_path: Path) -> None:
    picker = ConfigPicker(cpu_count=2, gpus=[], path=tmp_path / "c.yaml")
    picker.machines.value = 2
    picker.save_button.click()
    assert not (tmp_path / "c.yaml").exists()
    assert any(m.startswith("save failed") for m in picker.messages)


def test_default_config_file_is_the_starting_point(tmp_path: Path) -> None:
    save_config(Config(num_processes=2, use_cpu=True, mixed_precision="bf16"),
                tmp_path / "xdg" / "notebook_accel" / "config.yaml")
    picker = ConfigPicker(cpu_count=4, gpus=[])
    assert picker.config == Config(num_processes=2, use_cpu=True, mixed_precision="bf16")


def test_broken_default_file_is_a_note_not_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "xdg" / "notebook_accel" / "config.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("num_processes: [\n")
    picker = ConfigPicker(cpu_count=4, gpus=[])
    assert picker.messages[0].startswith("default config not used: YAML syntax error at line")
    assert picker.config == Config(num_processes=1, use_cpu=True)


def test_resolve_config_accepts_the_picker() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.processes.value = 2
    assert resolve_config(picker) == Config(num_processes=2, use_cpu=True)


def test_building_the_picker_does_not_initialise_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real detection (NVML / nvidia-smi) runs; any call into the CUDA runtime would fail the test."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the config picker called into the CUDA runtime")

    for name in ("init", "_lazy_init", "device_count", "is_available", "get_device_properties", "get_device_name"):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    hardware._physical_gpus.cache_clear()
    picker = ConfigPicker()
    assert picker.config.num_processes >= 1
    assert not torch.cuda.is_initialized()


def test_hardware_is_detected_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "detect_gpus", lambda: list(A100))
    monkeypatch.setattr(hardware, "cpu_count", lambda: 6)
    picker = ConfigPicker()
    assert "6 cores" in picker.hardware_info.value and "GPU 1" in picker.hardware_info.value
    assert picker.config.num_processes == 2


def test_resolve_config_of_an_invalid_picker_raises_its_problems() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.machines.value = 2
    with pytest.raises(ConfigError) as info:
        resolve_config(picker)
    assert info.value.problems == picker.problems


def test_choosing_fsdp_shows_its_section_and_writes_accelerates_keys(tmp_path: Path) -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[], path=tmp_path / "c.yaml")
    fsdp = picker.engines["FSDP"]
    assert fsdp.layout.display == "none" and picker.engines["DEEPSPEED"].layout.display == "none"
    picker.processes.value = 2
    picker.engine.value = "FSDP"
    assert fsdp.layout.display is None and picker.engines["DEEPSPEED"].layout.display == "none"
    assert [v for _, v in fsdp.controls["fsdp_sharding_strategy"].options] == ["FULL_SHARD", "SHARD_GRAD_OP",
                                                                              "NO_SHARD", "HYBRID_SHARD"]
    assert fsdp.values()["fsdp_auto_wrap_policy"] is None  # automatic: named classes, else _no_split_modules
    assert fsdp.controls["fsdp_auto_wrap_policy"].value == AUTOMATIC  # a dropdown shows None as a blank box
    fsdp.controls["fsdp_sharding_strategy"].value = "SHARD_GRAD_OP"
    fsdp.controls["fsdp_transformer_layer_cls_to_wrap"].value = "LlamaDecoderLayer"
    fsdp.controls["fsdp_cpu_ram_efficient_loading"].value = True
    assert fsdp.controls["fsdp_min_num_params"].layout.display == "none"  # only for size-based wrapping
    config = picker.config
    assert config.distributed_type == "FSDP" and "FSDP" in picker.message.value
    section = config.extra["fsdp_config"]
    assert section["fsdp_sharding_strategy"] == "SHARD_GRAD_OP" and section["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    assert section["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    assert "fsdp_min_num_params" not in section and "fsdp_auto_wrap_policy" not in section
    assert config.fsdp_plugin_kwargs is not None and config.fsdp_plugin_kwargs["cpu_ram_efficient_loading"] is True
    fsdp.controls["fsdp_auto_wrap_policy"].value = "SIZE_BASED_WRAP"
    assert fsdp.controls["fsdp_transformer_layer_cls_to_wrap"].layout.display == "none"
    assert picker.config.extra["fsdp_config"]["fsdp_min_num_params"] == 100_000_000
    assert "fsdp_transformer_layer_cls_to_wrap" not in picker.config.extra["fsdp_config"]
    written = picker.save()
    assert load_config(written).fsdp_plugin_kwargs == picker.config.fsdp_plugin_kwargs


def test_fsdp_problems_come_from_the_table_all_at_once(tmp_path: Path) -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.engine.value = "FSDP"
    picker.engines["FSDP"].controls["fsdp_transformer_layer_cls_to_wrap"].value = "Llama Layer, 3x"
    picker.engines["FSDP"].controls["fsdp_auto_wrap_policy"].value = "SIZE_BASED_WRAP"
    picker.engines["FSDP"].controls["fsdp_min_num_params"].value = -5
    picker.engines["FSDP"].controls["fsdp_auto_wrap_policy"].value = "TRANSFORMER_BASED_WRAP"
    picker.engines["FSDP"].controls["fsdp_auto_wrap_policy"].value = "SIZE_BASED_WRAP"
    assert any("fsdp_config.fsdp_min_num_params: got -5" in p for p in picker.problems)
    picker.engines["FSDP"].controls["fsdp_auto_wrap_policy"].value = "TRANSFORMER_BASED_WRAP"
    assert any("fsdp_transformer_layer_cls_to_wrap" in p and "allowed: module class names" in p
               for p in picker.problems)
    with pytest.raises(ConfigError, match="fsdp_transformer_layer_cls_to_wrap"):
        picker.config  # noqa: B018


def test_loading_an_accelerate_fsdp_file_fills_the_section(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text("distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n"
                    "  fsdp_sharding_strategy: 1\n  fsdp_backward_prefetch_policy: BACKWARD_POST\n"
                    "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  fsdp_use_orig_params: true\n")
    picker = ConfigPicker(path, cpu_count=4, gpus=[])
    fsdp = picker.engines["FSDP"]
    assert picker.engine.value == "FSDP"
    assert fsdp.controls["fsdp_sharding_strategy"].value == "FULL_SHARD"  # accelerate's number, shown by name
    assert fsdp.controls["fsdp_backward_prefetch"].value == "BACKWARD_POST"  # the older key, read as an alias
    section = picker.config.extra["fsdp_config"]
    assert section["fsdp_use_orig_params"] is True and "fsdp_backward_prefetch_policy" not in section
    assert load_config(path).fsdp_plugin_kwargs.items() <= picker.config.fsdp_plugin_kwargs.items()


def test_deepspeed_section_hides_what_a_json_file_owns(tmp_path: Path) -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.processes.value = 2
    picker.engine.value = "DEEPSPEED"
    ds = picker.engines["DEEPSPEED"]
    assert ds.layout.display is None and picker.engines["FSDP"].layout.display == "none"
    assert [v for _, v in ds.controls["zero_stage"].options] == [0, 1, 2, 3]
    ds.controls["zero_stage"].value = 1
    ds.controls["offload_param_device"].value = "cpu"
    assert any("deepspeed_config.offload_param_device" in p and "needs zero_stage 3" in p for p in picker.problems)
    ds.controls["zero_stage"].value = 3
    assert picker.problems == [] and picker.config.extra["deepspeed_config"]["zero_stage"] == 3
    assert "DeepSpeed" in picker.message.value
    json_file = tmp_path / "ds.json"
    json_file.write_text('{"zero_optimization": {"stage": 2}}')
    ds.controls["deepspeed_config_file"].value = str(json_file)
    assert ds.controls["zero_stage"].layout.display == "none"
    section = picker.config.extra["deepspeed_config"]
    assert section["deepspeed_config_file"] == str(json_file) and "zero_stage" not in section
    ds.controls["deepspeed_config_file"].value = str(tmp_path / "missing.json")
    assert any("cannot read the DeepSpeed JSON" in p for p in picker.problems)


def test_switching_back_to_ddp_keeps_the_sections_unused() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.processes.value = 2
    picker.engine.value = "FSDP"
    picker.engine.value = "DDP"
    assert picker.config.distributed_type == "MULTI_CPU" and picker.engines["FSDP"].layout.display == "none"


def test_a_refused_number_says_why_instead_of_snapping_back() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    picker.accumulation.value = 0
    assert picker.accumulation.value == 0
    assert any("gradient_accumulation_steps" in p and "0" in p for p in picker.problems), picker.problems
    assert "⚠" in picker.message.value
    with pytest.raises(ConfigError):
        picker.config
    picker.accumulation.value = 3
    assert picker.problems == [] and picker.config.gradient_accumulation_steps == 3


def test_a_default_config_on_a_cpu_machine_has_no_gpu_note() -> None:
    picker = ConfigPicker(Config(), cpu_count=2, gpus=[])
    assert picker.messages == [], picker.messages
    asks = ConfigPicker(Config(gpu_ids="0,1", num_processes=2), cpu_count=2, gpus=[])
    assert "the config asks for GPUs but none was detected: using CPU" in asks.messages


def test_the_picker_shows_a_static_summary_where_widgets_cannot_render(tmp_path: Path) -> None:
    picker = ConfigPicker(Config(num_processes=2, use_cpu=True, mixed_precision="bf16"), cpu_count=4, gpus=[],
                          path=tmp_path / "c.yaml")
    bundle = picker._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live form where widgets render
    for form in (bundle["text/plain"], bundle["text/html"], repr(picker)):  # never the widget tree
        assert "ConfigPicker(" not in form and "children=" not in form and "HTML(value" not in form
    text = repr(picker)
    assert text.startswith("Config picker: 2 process(es) on CPU, mixed precision bf16")
    assert "num_processes: 2" in text and "mixed_precision: bf16" in text  # the YAML Save would write
    picker.accumulation.value = 0
    assert "not a valid config yet" in repr(picker) and "gradient_accumulation_steps" in repr(picker)


def test_the_displayed_summary_is_a_second_output_that_follows_every_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: list[dict[str, str]] = []
    updates: list[dict[str, str]] = []

    class Handle:
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            updates.append(bundle)

    def display(bundle: dict[str, str], raw: bool, display_id: bool = False) -> Handle | None:
        shown.append(bundle)
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", display)
    picker = ConfigPicker(cpu_count=4, gpus=[], path=tmp_path / "c.yaml")
    picker._ipython_display_()  # what a cell ending in `picker` does
    form, summary = shown
    assert "application/vnd.jupyter.widget-view+json" in form
    # a reopened trusted notebook hides the form's dead widget view (the output right before the summary)
    rule = "<style>.jp-OutputArea-child:has(+ .jp-OutputArea-child .nacc-picker-summary)"
    assert summary["text/html"].startswith(rule)
    assert " > .jp-OutputArea-output.jupyter-widgets{display:none}</style>" in summary["text/html"]
    assert set(summary) == {"text/html", "text/plain"} and "num_processes: 1" in summary["text/plain"]
    assert str(tmp_path / "c.yaml") in summary["text/html"]
    picker.processes.value = 3
    assert "num_processes: 3" in updates[-1]["text/plain"] and "num_processes: 3" in updates[-1]["text/html"]
    count = len(updates)
    picker.save()  # a note, the same configuration: no new update
    assert len(updates) == count


def test_long_labels_are_split_into_a_name_and_a_hint() -> None:
    picker = ConfigPicker(cpu_count=4, gpus=[])
    fsdp = picker.engines["FSDP"]
    names = [c.description for c in fsdp.controls.values()] + [picker.batch_size.description]
    assert "Layer classes to wrap" in names and "CPU offload" in names and "Batch size per device" in names
    assert all(len(n) <= 33 for n in names), [n for n in names if len(n) > 33]  # fits the 230 px label column


def test_the_summarys_yaml_is_in_a_fixed_width_font_in_an_html_export() -> None:
    from notebook_accel.widgets.picker_summary import summary_html

    page = summary_html(Config(num_processes=2, use_cpu=True), [])
    pre_style = page.split("<pre", 1)[1].split(">", 1)[0]
    assert "monospace" in pre_style, pre_style  # nbconvert's page gives a bare <pre> its proportional text font
