"""Real 2-process gloo runs: every FSDP strategy trains like DDP, with half the memory when it shards."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from notebook_accel import notebook_launcher
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from tests.engines.fsdp import workers
from tests.engines.fsdp.test_config import ISSUE_YAML

STRATEGIES = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]


def launch(*args: Any, **kwargs: Any) -> Any:
    """Run ``workers.train`` on 2 CPU processes; rank 0's result."""
    return notebook_launcher(functools.partial(workers.train, **kwargs), args, num_processes=2, dashboard=False,
                             use_cpu=True)


@pytest.fixture(scope="module")
def ddp() -> dict[str, Any]:
    """The DDP baseline, trained once for the module."""
    return launch(None)


def assert_trains_like(run: dict[str, Any], baseline: dict[str, Any], atol: float = 1e-5, steps: int = 10) -> None:
    """Same losses, clip norms and final full weights (fp32 tolerance)."""
    assert len(run["losses"]) == len(baseline["losses"]) >= steps  # 10 optimizer steps on 2 processes
    torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(baseline["losses"]), rtol=0, atol=atol)
    torch.testing.assert_close(torch.tensor(run["norms"]), torch.tensor(baseline["norms"]), rtol=1e-5, atol=atol)
    assert run["weights"].keys() == baseline["weights"].keys()
    for name, value in baseline["weights"].items():
        torch.testing.assert_close(torch.tensor(run["weights"][name]), torch.tensor(value), rtol=0, atol=atol)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_trains_to_the_ddp_loss(strategy: str, ddp: dict[str, Any]) -> None:
    run = launch(strategy)
    assert (run["type"], ddp["type"]) == ("FSDP", "MULTI_CPU")
    assert_trains_like(run, ddp)
    assert run["gathered_rows"] == ddp["gathered_rows"] == 80 and run["unwrapped_is_model"]
    assert ddp["norms"][0] > 0.5  # clipping really happened, so the norms compared are the pre-clip totals


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD"])
def test_sharding_halves_parameter_and_optimizer_memory(strategy: str, ddp: dict[str, Any]) -> None:
    run = launch(strategy)
    full = ddp["param_bytes"][0]
    assert ddp["param_bytes"] == [full, full]
    assert sum(run["param_bytes"]) == full  # the shards add up to the model: nothing is held twice
    assert max(run["param_bytes"]) <= 0.51 * full and max(run["optimizer_bytes"]) <= 0.51 * ddp["optimizer_bytes"][0]
    no_shard = launch("NO_SHARD") if strategy == "FULL_SHARD" else None
    assert no_shard is None or no_shard["param_bytes"] == [full, full]


@pytest.mark.timeout(180)
def test_accumulation_uses_no_sync_and_matches_ddp() -> None:
    baseline = launch(None, 2)
    run = launch("FULL_SHARD", 2)
    assert len(run["losses"]) == 20 and len(run["norms"]) == 10
    assert_trains_like(run, baseline)


@pytest.mark.timeout(120)
def test_optimizer_prepared_before_the_model_is_rebound(ddp: dict[str, Any]) -> None:
    assert_trains_like(launch("FULL_SHARD", optimizer_first=True), ddp)


@pytest.mark.timeout(120)
def test_activation_checkpointing_offload_and_prefetch_train_like_ddp(ddp: dict[str, Any]) -> None:
    options = {"activation_checkpointing": True, "cpu_offload": True, "forward_prefetch": True}
    run = launch("FULL_SHARD", options=options)
    assert_trains_like(run, ddp)
    assert (ddp["block_calls"], run["block_calls"]) == (20, 40)  # each block's forward ran again in backward


@pytest.mark.timeout(120)
def test_size_based_wrap_trains_like_ddp(ddp: dict[str, Any]) -> None:
    options = {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 1000, "transformer_cls_names_to_wrap": None}
    assert_trains_like(launch("FULL_SHARD", options=options), ddp)


@pytest.mark.timeout(120)
def test_bf16_policy_trains_close_to_fp32(ddp: dict[str, Any]) -> None:
    run = launch("FULL_SHARD", mixed_precision="bf16")
    assert run["weights"]["head.weight"] != ddp["weights"]["head.weight"]  # bf16 really ran
    torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(ddp["losses"]), rtol=0.1, atol=0.05)


@pytest.mark.timeout(120)
def test_the_issue_yaml_loads_and_runs_with_meta_models_off_rank_0(tmp_path: Path, ddp: dict[str, Any]) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text(ISSUE_YAML.replace("LlamaDecoderLayer", "Block") + "num_processes: 2\nuse_cpu: true\n")
    # cpu_ram_efficient_loading: rank 1 builds TinyNet on the meta device and receives rank 0's weights
    run = launch(None, config_path=str(path), meta_off_rank0=True)
    assert run["type"] == "FSDP"
    assert_trains_like(run, ddp)


@pytest.mark.timeout(120)
def test_the_launch_environment_carries_the_plugin(ddp: dict[str, Any]) -> None:
    plugin = FullyShardedDataParallelPlugin(sharding_strategy="SHARD_GRAD_OP", transformer_cls_names_to_wrap="Block")
    run = launch(None, fsdp_env=plugin.to_json())
    assert run["type"] == "FSDP" and run["plugin"] == plugin.to_json()
    assert_trains_like(run, ddp)


@pytest.mark.timeout(120)
def test_save_model_writes_full_weights_plain_torch_loads(tmp_path: Path) -> None:
    run = launch("FULL_SHARD", save_dir=str(tmp_path / "export"))
    assert run["saved"] == str(tmp_path / "export" / "model.safetensors")
    plain = workers.TinyNet()
    plain.load_state_dict(load_file(run["saved"]))  # strict: every key, full shapes
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(value, torch.tensor(run["weights"][name]), rtol=0, atol=0)
    x = workers.dataset(8).tensors[0]
    assert plain(x).shape == (8, 1)


@pytest.mark.timeout(300)
def test_hybrid_shard_on_a_two_by_two_mesh_trains_like_ddp() -> None:
    from tests.engines.fsdp import hybrid_workers

    def four(strategy: str | None) -> dict[str, Any]:
        return notebook_launcher(hybrid_workers.two_machines_of_two, (strategy,), num_processes=4, dashboard=False,
                                 use_cpu=True)

    ddp, hybrid = four(None), four("HYBRID_SHARD")
    assert_trains_like(hybrid, ddp, steps=5)  # the 80 samples make 5 steps on 4 processes
    full = ddp["param_bytes"][0]
    # shards within a "machine" of 2, replicated across the 2 "machines": each rank holds half, the run twice
    assert sum(hybrid["param_bytes"]) == 2 * full and max(hybrid["param_bytes"]) <= 0.51 * full


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["fp16", {"param_dtype": "bf16", "reduce_dtype": "fp32"}])
def test_plugin_precision_policies_train_close_to_fp32(policy: Any, ddp: dict[str, Any]) -> None:
    run = launch("FULL_SHARD", options={"mixed_precision_policy": policy})
    assert run["weights"]["head.weight"] != ddp["weights"]["head.weight"]  # low precision really ran
    torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(ddp["losses"]), rtol=0.1, atol=0.05)
