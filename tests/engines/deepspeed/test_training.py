"""Real 2-process gloo runs: every ZeRO stage trains like DDP; checkpoints resume exactly and survive a kill."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from notebook_accel import notebook_launcher
from notebook_accel.checkpointing.manifest import read_manifest, write_manifest
from notebook_accel.launcher import WorkerError
from tests.engines.deepspeed import needs_deepspeed, workers

pytestmark = needs_deepspeed


def launch(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``function`` on 2 CPU processes; rank 0's result."""
    return notebook_launcher(functools.partial(function, *args, **kwargs), (), num_processes=2, dashboard=False,
                             use_cpu=True)


@pytest.fixture(scope="module")
def ddp() -> dict[str, Any]:
    """The DDP baseline (clip_grad_norm_ at 0.5), trained once for the module."""
    return launch(workers.train, None)


def assert_trains_like(run: dict[str, Any], baseline: dict[str, Any], atol: float = 1e-5) -> None:
    """Same losses, learning rates and final full weights (fp32 tolerance)."""
    assert len(run["losses"]) == len(baseline["losses"]) >= 10
    torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(baseline["losses"]), rtol=0, atol=atol)
    assert run["lrs"] == baseline["lrs"]
    assert run["weights"].keys() == baseline["weights"].keys()
    for name, value in baseline["weights"].items():
        torch.testing.assert_close(torch.tensor(run["weights"][name]), torch.tensor(value), rtol=0, atol=atol)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_each_zero_stage_trains_to_the_ddp_loss(stage: int, ddp: dict[str, Any], tmp_path: Path) -> None:
    run = launch(workers.train, {"zero_stage": stage, "gradient_clipping": 0.5}, save_dir=str(tmp_path))
    assert (run["type"], run["engine"], run["stage"], ddp["engine"]) == ("DEEPSPEED", "DEEPSPEED", stage, "DDP")
    assert run["unwrapped"] == "TinyNet" and run["gathered_rows"] == 80
    assert run["config"]["train_micro_batch_size_per_gpu"] == 4 and run["config"]["gradient_clipping"] == 0.5
    assert run["norm"] > 0  # the norm DeepSpeed measured at its last step
    assert_trains_like(run, ddp)
    saved = load_file(run["saved"])  # full weights, gathered under ZeRO-3, loadable with plain safetensors
    for name, value in run["weights"].items():
        assert torch.equal(saved[name], torch.tensor(value))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("options", [{"zero_stage": 2, "offload_optimizer_device": "cpu"},
                                     {"zero_stage": 3, "offload_optimizer_device": "cpu",
                                      "offload_param_device": "cpu"}])
def test_cpu_offload_trains_like_ddp(options: dict[str, Any], ddp: dict[str, Any]) -> None:
    run = launch(workers.train, {**options, "gradient_clipping": 0.5})
    zero = run["config"]["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu"
    assert_trains_like(run, ddp)


@pytest.mark.timeout(240)
def test_accumulation_is_done_by_deepspeed_and_matches_ddp() -> None:
    baseline = launch(workers.train, None, 2)
    run = launch(workers.train, {"zero_stage": 2, "gradient_clipping": 0.5}, 2)
    assert run["config"]["gradient_accumulation_steps"] == 2 and len(run["losses"]) == 20
    assert_trains_like(run, baseline)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_resume_is_exact(stage: int, tmp_path: Path) -> None:
    options = {"zero_stage": stage}
    straight = launch(workers.resume, options, str(tmp_path / "a"), False, 4, 4)
    saved = launch(workers.resume, options, str(tmp_path / "b"), False, 4, 0)
    resumed = launch(workers.resume, options, str(tmp_path / "b"), True, 0, 4)
    assert resumed["losses"] == straight["losses"]  # bitwise: same floats
    assert resumed["weights"] == straight["weights"] and resumed["random"] == straight["random"]
    assert "manifest.json" in saved["files"]
    if stage > 0:  # ZeRO: each rank's optimizer partition, and DeepSpeed's recovery script
        assert {"zero_pp_rank_1_mp_rank_00_optim_states.pt", "zero_to_fp32.py"} <= set(saved["files"])


@pytest.mark.timeout(240)
def test_load_of_another_stage_is_refused_before_anything_changes(tmp_path: Path) -> None:
    launch(workers.resume, {"zero_stage": 2}, str(tmp_path / "c"), False, 2, 0)
    refused = launch(workers.load_refused, {"zero_stage": 1}, str(tmp_path / "c"))
    assert "saved with ZeRO stage 2, this run uses stage 1" in refused["error"] and refused["unchanged"]


@pytest.mark.timeout(240)
def test_a_kill_during_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    first = launch(workers.resume, {"zero_stage": 2}, str(directory), False, 2, 0)
    with pytest.raises(WorkerError):
        launch(workers.resume, {"zero_stage": 2}, str(directory.with_name("other")), False, 3, 0,
               kill_during_save=True)
    assert not directory.with_name("other").exists()  # the partial save never appears under its name
    again = launch(workers.resume, {"zero_stage": 2}, str(directory), True, 0, 0)
    assert again["files"] == first["files"]


class Payload:
    """An arbitrary class in a pickle: the weights-only reader refuses it (it could run code when unpickled)."""


@pytest.mark.timeout(240)
def test_a_deepspeed_file_that_is_not_plain_data_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    launch(workers.resume, {"zero_stage": 2}, str(directory), False, 2, 0)
    torch.save({"optimizer_state_dict": Payload()}, directory / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    manifest = read_manifest(str(directory))  # the checksums are made to match: only the content is wrong
    manifest.record_files(str(directory))
    write_manifest(str(directory), manifest)
    refused = launch(workers.load_refused, {"zero_stage": 2}, str(directory))
    assert "since DeepSpeed would unpickle it in full" in refused["error"]
    assert refused["unchanged"]
