"""The config picker's pure rules, without a widget."""

from __future__ import annotations

import pytest

from notebook_accel.config import Config, ConfigError
from notebook_accel.hardware import GpuInfo
from notebook_accel.widgets import picker_form


def test_form_problems_name_the_value_and_what_is_allowed() -> None:
    assert picker_form.form_problems(False, 0, 2, 4, 4, 1, 0) == []
    problems = picker_form.form_problems(True, 0, 3, 1, 4, 2, 0)
    assert problems[0] == "GPUs: select at least one GPU, or choose CPU"
    assert "3 is more than the chosen devices allow (0 GPU(s) chosen); use 1 to 1" in problems[1]
    assert problems[2].startswith("port: 0 (pick a free port) only works on one machine")


def test_gpu_ids_of_a_selection() -> None:
    assert picker_form.gpu_ids(False, [0], [0, 1]) is None
    assert picker_form.gpu_ids(True, [1, 0], [0, 1]) == "all"
    assert picker_form.gpu_ids(True, [2, 0], [0, 1, 2]) == "0,2"
    assert picker_form.gpu_ids(True, [], [0, 1]) is None


def test_hardware_line_and_effective_batch() -> None:
    gpu = GpuInfo(0, "A<100>", 80 * 2**30, (8, 0))
    assert picker_form.hardware_html(8, []) == "<b>CPU</b>: 8 cores<br><b>GPUs</b>: none detected"
    assert "<b>GPU 0</b>: A&lt;100&gt;, 80.0 GiB" in picker_form.hardware_html(8, [gpu])
    assert picker_form.effective_batch_html(None).endswith("set a batch size per device to see it")
    config = Config(num_processes=2, per_device_batch_size=8, gradient_accumulation_steps=4)
    assert "<b>64</b> = 8 per device × 2 processes × 4 accumulation steps" in picker_form.effective_batch_html(config)


def test_check_hardware_refuses_what_the_form_cannot_show() -> None:
    with pytest.raises(ConfigError, match="cpu_count: got 0"):
        picker_form.check_hardware(0, None)
    with pytest.raises(ConfigError, match="gpus: got 'A100'"):
        picker_form.check_hardware(None, "A100")
