"""DeepSpeedPlugin, the "auto" filling and the missing-extra error (one process, no training)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from notebook_accel.config import Config
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.engines.deepspeed.auto import fill_auto
from notebook_accel.engines.deepspeed.dummy import fill_from_dummies
from notebook_accel.engines.registry import DEEPSPEED
from notebook_accel.plugins import ConfigurationError
from tests.engines.deepspeed import needs_deepspeed


def test_plugin_writes_a_config_from_its_fields() -> None:
    plugin = DeepSpeedPlugin(zero_stage=3, offload_optimizer_device="CPU", offload_param_device="cpu",
                             gradient_clipping=1, zero3_save_16bit_model=True)
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero == {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
                    "stage3_gather_16bit_weights_on_model_save": True}
    assert plugin.deepspeed_config["gradient_clipping"] == 1.0 and DeepSpeedPlugin().zero_stage == 2


def test_plugin_reports_every_bad_field_at_once() -> None:
    with pytest.raises(ConfigurationError) as info:
        DeepSpeedPlugin(zero_stage=4, offload_param_device="nvme", gradient_clipping="big")
    text = str(info.value)
    assert text.count("\n  - ") == 3 and "zero_stage: got 4" in text and "use 'cpu'" in text
    with pytest.raises(ConfigurationError, match="parameter offload needs zero_stage 3"):
        DeepSpeedPlugin(zero_stage=2, offload_param_device="cpu")


def test_a_json_path_is_read_and_owns_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto"}))
    plugin = DeepSpeedPlugin(hf_ds_config=str(path))
    assert plugin.zero_stage == 1 and plugin.deepspeed_config["train_micro_batch_size_per_gpu"] == "auto"
    with pytest.raises(ConfigurationError, match="set it in the JSON instead"):
        DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=2)
    with pytest.raises(ConfigurationError, match="cannot read the DeepSpeed JSON"):
        DeepSpeedPlugin(hf_ds_config=str(tmp_path / "missing.json"))


def test_the_plugin_travels_through_json_with_the_file_contents(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}, "gradient_clipping": 0.5}))
    config = Config(distributed_type="DEEPSPEED", num_processes=2, use_cpu=True,
                    extra={"deepspeed_config": {"deepspeed_config_file": str(path)}})
    launch = DEEPSPEED.launch_value(config)
    value = None if launch is None else launch.options
    path.unlink()  # the workers need not see the file
    plugin = DeepSpeedPlugin.from_json(value or "")
    assert plugin.zero_stage == 3 and plugin.deepspeed_config["gradient_clipping"] == 0.5
    assert DEEPSPEED.launch_value(Config()) is None
    with pytest.raises(ConfigurationError, match="unknown fields"):
        DeepSpeedPlugin.from_json('{"stage": 3}')


def test_auto_values_are_filled_from_the_accelerator() -> None:
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps":
              "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    out = fill_auto(config, micro_batch=4, accumulation=2, world_size=2, clipping=None, mixed_precision="bf16")
    assert (out["train_micro_batch_size_per_gpu"], out["gradient_accumulation_steps"], out["train_batch_size"]) == (
        4, 2, 16)
    assert "gradient_clipping" not in out and out["bf16"]["enabled"] and not out["fp16"]["enabled"]
    assert out["zero_optimization"] == {"stage": 3} and config["gradient_clipping"] == "auto"
    with pytest.raises(ConfigurationError, match="no prepared DataLoader"):
        fill_auto(config, micro_batch=None, accumulation=1, world_size=1, clipping=None, mixed_precision="no")
    with pytest.raises(ConfigurationError, match="'auto' is not known for optimizer.params.lr"):
        fill_auto({**config, "optimizer": {"params": {"lr": "auto"}}}, micro_batch=1, accumulation=1, world_size=1,
                  clipping=1.0, mixed_precision="no")


def test_a_missing_deepspeed_names_the_extra_and_plain_runs_never_import_it() -> None:
    code = ("import sys; sys.modules['deepspeed'] = None\n"
            "import torch\n"
            "from notebook_accel import Accelerator\n"
            "from notebook_accel.engines.deepspeed import DeepSpeedPlugin\n"
            "a = Accelerator(cpu=True); a.prepare(torch.nn.Linear(1, 1))\n"
            "try:\n"
            "    Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin())\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install notebook-accel[deepspeed]" in out.stdout and "restart the Python kernel" in out.stdout
    plain = subprocess.run([sys.executable, "-c", "import sys, torch\nfrom notebook_accel import Accelerator\n"
                            "Accelerator(cpu=True).prepare(torch.nn.Linear(1, 1))\nprint('deepspeed' in sys.modules)"],
                           capture_output=True, text=True, timeout=120, check=True)
    assert plain.stdout.strip() == "False"


def test_fsdp_and_deepspeed_together_are_refused() -> None:
    from notebook_accel import Accelerator
    from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

    with pytest.raises(ConfigurationError, match="pick one of them"):
        Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(), deepspeed_plugin=DeepSpeedPlugin())


def _one_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.engines.deepspeed.one_process", *args], capture_output=True,
                          text=True, timeout=240, cwd=Path(__file__).resolve().parents[3])


@needs_deepspeed
@pytest.mark.timeout(300)
def test_one_process_trains_with_bf16_on_cpu_and_fp16_is_refused() -> None:
    bf16 = _one_process("bf16", "3")
    assert bf16.returncode == 0, bf16.stderr[-2000:]
    trained, at_exit = bf16.stdout.strip().splitlines()[-2:]
    assert trained.startswith("OK") and trained.endswith("torch.bfloat16")
    assert at_exit == "group after exit functions: False"  # a gloo group left to C++ exit aborts now and then
    fp16 = _one_process("fp16", "2")
    assert fp16.returncode != 0 and "mixed_precision='fp16' is refused by DeepSpeed" in fp16.stderr
    assert "use 'bf16' or 'no' on CPU" in fp16.stderr


@needs_deepspeed
@pytest.mark.timeout(300)
def test_prepare_refusals_say_what_to_do() -> None:
    result = _one_process("errors")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "Error" in line or line == "prepared"]
    assert len(lines) == 4, result.stdout
    assert "pass the model and its optimizer to the same accelerator.prepare" in lines[0]
    assert "no prepared DataLoader gives a batch size" in lines[1]
    assert "has an 'optimizer' section and a torch optimizer was passed" in lines[2]
    assert "['Expert'] are not classes of this model's modules; its classes: Linear" in lines[3]


@needs_deepspeed
@pytest.mark.timeout(300)
def test_the_dummies_are_replaced_by_the_optimizer_and_scheduler_the_config_defines() -> None:
    result = _one_process("dummies")
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["optimizer"] == run["inner"] == "DeepSpeedZeroOptimizer"  # built by DeepSpeed from the config
    assert run["scheduler"] == "WarmupLR"
    # warmup_max_lr from DummyOptim(lr=0.05), warmup_num_steps from DummyScheduler: linear to 0.05 in 4 steps
    assert run["lrs"] == pytest.approx([0.0, 0.0125, 0.025, 0.0375, 0.05, 0.05, 0.05, 0.05])
    assert run["weight_decay"] == 0.0
    assert len(run["losses"]) == 8


@needs_deepspeed
@pytest.mark.timeout(300)
def test_a_dummy_without_its_config_section_is_refused() -> None:
    result = _one_process("dummy_errors")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "Error" in line or line == "prepared"]
    assert len(lines) == 2, result.stdout
    assert "DummyOptim stands for the optimizer of the DeepSpeed config's 'optimizer' section" in lines[0]
    assert "DummyScheduler stands for the scheduler of the DeepSpeed config's 'scheduler' section" in lines[1]


def test_the_dummies_fill_their_sections_auto_values_as_accelerate() -> None:
    from notebook_accel.utils import DummyOptim, DummyScheduler

    config = {"optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "eps": 1e-8}},
              "scheduler": {"type": "WarmupDecayLR", "params": {
                  "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                  "total_num_steps": "auto"}}}
    optimizer = DummyOptim([], lr=3e-4, weight_decay=0.01)
    filled = fill_from_dummies(config, optimizer, DummyScheduler(optimizer, total_num_steps=101, warmup_num_steps=10),
                               num_processes=2)
    assert filled["optimizer"]["params"] == {"lr": 3e-4, "weight_decay": 0.01, "eps": 1e-8}
    assert filled["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 10,
                                             "total_num_steps": 51}  # each of 2 processes runs ceil(101 / 2)
    assert config["optimizer"]["params"]["lr"] == "auto"  # a copy: the plugin's config is left as it is
    with pytest.raises(ConfigurationError, match="scheduler.params.total_num_steps is 'auto' but no value is known"):
        fill_from_dummies(config, optimizer, DummyScheduler(optimizer), num_processes=1)
    callable_only = DummyScheduler(optimizer, lr_scheduler_callable=lambda opt: None)
    assert fill_from_dummies({"optimizer": {}}, None, callable_only, num_processes=1) == {"optimizer": {}}
