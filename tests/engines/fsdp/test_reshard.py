"""Resuming an FSDP checkpoint with another number of processes: refused by default, resharded on request."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from notebook_accel import notebook_launcher
from tests.engines.fsdp import reshard_workers


def launch(processes: int, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on ``processes`` CPU processes; rank 0's result."""
    return notebook_launcher(fn, args, num_processes=processes, dashboard=False, use_cpu=True)


def _same_training_state(saved: dict[str, Any], loaded: dict[str, Any]) -> None:
    assert loaded["weights"] == saved["weights"]  # bit for bit, whatever the number of shards
    assert loaded["optimizer"] == saved["optimizer"]  # AdamW's step, exp_avg, exp_avg_sq per parameter
    assert loaded["step"] == saved["step"] == 4
    assert math.isfinite(loaded["loss"])  # training goes on from there
    # the per-rank RNG streams come back only with the same number of processes
    assert loaded["rng_kept"] == (loaded["world"] != saved["world"])


@pytest.mark.timeout(240)
def test_two_process_sharded_checkpoint_loads_in_one_and_two(tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    saved = launch(2, reshard_workers.save, directory)
    assert saved["sharded"] == "FSDP"
    one = launch(1, reshard_workers.load, directory)
    assert one["world"] == 1 and one["sharded"] != "FSDP"  # one process: the full model, nothing sharded
    _same_training_state(saved, one)
    _same_training_state(saved, launch(2, reshard_workers.load, directory))


@pytest.mark.timeout(240)
def test_two_to_three_and_one_to_two(tmp_path: Path) -> None:
    two = str(tmp_path / "two")
    saved = launch(2, reshard_workers.save, two)
    _same_training_state(saved, launch(3, reshard_workers.load, two))  # 3 uneven shards of every weight
    one = str(tmp_path / "one")
    saved = launch(1, reshard_workers.save, one)  # one process with the plugin writes the FSDP layout too
    assert (tmp_path / "one" / "fsdp_state_0.metadata").is_file()
    _same_training_state(saved, launch(2, reshard_workers.load, one))


@pytest.mark.timeout(240)
def test_full_state_dict_checkpoint_loads_with_another_world_size(tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    saved = launch(2, reshard_workers.save, directory, "FULL_STATE_DICT")
    _same_training_state(saved, launch(1, reshard_workers.load, directory, "FULL_STATE_DICT"))


@pytest.mark.timeout(240)
def test_another_world_size_is_refused_by_default_and_changes_nothing(tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    launch(2, reshard_workers.save, directory)
    for processes in (1, 3):
        out = launch(processes, reshard_workers.load, directory, "SHARDED_STATE_DICT", False)
        assert "CheckpointError" in out["error"] and f"saved by 2 process(es), this run has {processes}" in out["error"]
        assert "allow_world_size_change=True" in out["error"] and "RNG streams" in out["error"]
        assert out["unchanged"] and out["optimizer_state"] == 0


@pytest.mark.timeout(240)
def test_a_plain_checkpoint_is_not_read_as_fsdp(tmp_path: Path) -> None:
    from tests.engines.fsdp import workers

    directory = str(tmp_path / "ddp")
    launch(2, workers.resume, None, directory, False)  # DDP: pytorch_model.bin, optimizer keyed by position
    out = launch(2, reshard_workers.load, directory, "SHARDED_STATE_DICT", False)
    assert "model 0 (FSDPTinyNet) is stored as 'pytorch_model.bin' in the checkpoint" in out["error"]
    assert "save and load with the same FSDP setting" in out["error"]
    assert out["unchanged"] and out["optimizer_state"] == 0


@pytest.mark.timeout(240)
def test_a_damaged_shard_is_refused_before_resharding(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(2, reshard_workers.save, str(directory))
    shard = directory / "fsdp_state_0_rank1_0.distcp"  # a file no rank of a 1-process run calls its own
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = launch(1, reshard_workers.load, str(directory))
    assert "fsdp_state_0_rank1_0.distcp: its XXH3-128 checksum differs" in out["error"]
    assert out["unchanged"] and out["optimizer_state"] == 0


@pytest.mark.timeout(300)
def test_a_flipped_byte_only_another_rank_reads_is_refused(tmp_path: Path) -> None:
    """Saved by 3, loaded by 2: rank 0 checks ``rank2``'s file (2 % 2 == 0) but reads only a few records from it
    (the optimizer's param_groups and steps; the rows there are rank 1's), so the byte flipped in the middle lies
    in bytes rank 0's reader skips and rank 1 reads unchecked. Rank 0 hashes the skipped bytes too; nothing
    changes on either rank."""
    directory = tmp_path / "ckpt"
    launch(3, reshard_workers.save, str(directory))
    shard = directory / "fsdp_state_0_rank2_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = launch(2, reshard_workers.load, str(directory))
    assert "fsdp_state_0_rank2_0.distcp: its XXH3-128 checksum differs" in out["error"], out["error"]
    assert out["unchanged"] and out["optimizer_state"] == 0
