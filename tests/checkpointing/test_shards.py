"""Tests for notebook_accel.checkpointing.shards: max_shard_size parsing, the shard plan, shared tensors."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.checkpointing import ShardSizeError
from notebook_accel.checkpointing.shards import for_safetensors, parse_size, plan_shards


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (100, 100),
        ("100", 100),
        ("5MB", 5 * 10**6),
        ("10GB", 10 * 10**9),
        ("500KiB", 500 * 2**10),
        ("5mib", 5 * 2**20),
        ("2GiB", 2 * 2**30),
        ("1.5KB", 1500),
        ("80Mb", 10**7),  # lower-case b: bits, as in accelerate
        (" 3 kB ", 3000),
    ],
)
def test_parse_size(size: int | str, expected: int) -> None:
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", ["10 giga", "GB", "-5MB", "5XB", "", 0, -1, "0KB", 1.5, None, True])
def test_bad_sizes_are_refused_with_the_accepted_forms(size: object) -> None:
    with pytest.raises(ShardSizeError, match=r"max_shard_size=.*'5MB'.*'5MiB'") as info:
        parse_size(size)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


def _sd(*sizes: int) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.zeros(n) for i, n in enumerate(sizes)}  # float32: 4 bytes per element


def test_everything_fits_in_one_file() -> None:
    plan = plan_shards(_sd(4, 4), 10**9, safe_serialization=True)
    assert plan.files == {"model.safetensors": ["t0", "t1"]} and plan.index is None
    plan = plan_shards(_sd(4, 4), 10**9, safe_serialization=False)
    assert plan.files == {"pytorch_model.bin": ["t0", "t1"]} and plan.index_name == "pytorch_model.bin.index.json"


def test_shards_fill_in_order_and_a_big_tensor_goes_alone() -> None:
    plan = plan_shards(_sd(2, 2, 10, 1, 1), 16, safe_serialization=False)  # bytes: 8, 8, 40, 4, 4
    assert list(plan.files.values()) == [["t0", "t1"], ["t2"], ["t3", "t4"]]
    assert list(plan.files) == [f"pytorch_model-0000{i}-of-00003.bin" for i in (1, 2, 3)]
    assert plan.index is not None
    assert plan.index["metadata"] == {"total_size": 64}
    assert plan.index["weight_map"]["t2"] == "pytorch_model-00002-of-00003.bin"


def test_tensors_sharing_storage_count_once_and_stay_together() -> None:
    weight = torch.zeros(4)
    plan = plan_shards({"a": weight, "tied": weight, "b": torch.zeros(4)}, 20, safe_serialization=False)
    assert list(plan.files.values()) == [["a", "tied"], ["b"]]
    assert plan.index is not None and plan.index["metadata"] == {"total_size": 32}


def test_tied_weights_keep_one_name_with_a_warning() -> None:
    weight = torch.arange(4.0)
    with pytest.warns(UserWarning, match=r"not saved: lm_head.weight \(same tensor as embed.weight\)"):
        out = for_safetensors({"lm_head.weight": weight, "embed.weight": weight, "bias": torch.ones(2)})
    assert sorted(out) == ["bias", "embed.weight"]
    assert out["embed.weight"] is weight  # not copied


def test_different_views_of_one_buffer_are_copied_not_dropped() -> None:
    buffer = torch.arange(6.0)
    out = for_safetensors({"low": buffer[:3], "high": buffer[3:]})
    assert out["low"].tolist() == [0.0, 1.0, 2.0] and out["high"].tolist() == [3.0, 4.0, 5.0]
    assert out["low"].untyped_storage().data_ptr() != out["high"].untyped_storage().data_ptr()
