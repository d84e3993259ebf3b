"""Real multi-process correctness: 2 gloo processes forked by notebook_launcher, compared with 1 process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import notebook_launcher
from tests.distributed import workers


def launch(fn: Any, *args: Any, n: int = 2) -> Any:
    """Run ``fn(*args)`` on ``n`` processes (in this process for 1) and return rank 0's result."""
    return notebook_launcher(fn, args, num_processes=n, dashboard=False)


def assert_params_close(a: list[Any], b: list[Any]) -> None:
    """Every parameter (as nested lists) allclose."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x), torch.tensor(y), rtol=1e-5, atol=1e-6)


@pytest.mark.timeout(120)
def test_two_processes_batch_b_equals_one_process_batch_2b() -> None:
    two = launch(workers.train, 3, 1, 24, True, 2)
    one = launch(workers.train, 6, 1, 24, True, 2, n=1)
    assert two["type"] == "MULTI_CPU" and one["type"] == "NO"
    assert two["steps_per_epoch"] == one["steps_per_epoch"] == 4
    assert_params_close(two["params"], one["params"])
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=1e-6)


@pytest.mark.timeout(120)
def test_a_generator_driven_shuffle_on_two_processes_trains_the_one_process_model() -> None:
    two = launch(workers.train_with_generator, 3)
    one = launch(workers.train_with_generator, 6, n=1)
    assert_params_close(two["params"], one["params"])
    for a, b in zip(two["params"], one["params"]):  # accelerate's tolerance for this check
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6)
    plain = DataLoader(range(24), batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(42))
    plain_epochs = [b.tolist() for _ in range(3) for b in plain]
    assert one["batches"][0] == plain_epochs  # one process: the plain loader's order
    rank0, rank1 = two["batches"]
    assert [a + b for a, b in zip(rank0, rank1)] == plain_epochs  # two: the same order, split across ranks


@pytest.mark.timeout(120)
def test_accumulation_matches_bigger_batch_and_flushes_at_loader_end() -> None:
    # 2 processes x accumulation 2 x batch 2 == 1 process x batch 8 (16 items: two real steps)
    accumulated = launch(workers.train, 2, 2, 16)
    big = launch(workers.train, 8, 1, 16, n=1)
    assert accumulated["syncs"] == [False, True, False, True]
    assert big["syncs"] == [True, True]
    assert_params_close(accumulated["params"], big["params"])
    # 12 items: 3 batches per process with accumulation 2 -> the last batch flushes (F, T, T)
    flushed = launch(workers.train, 2, 2, 12)
    same = launch(workers.train, 4, 2, 12, n=1)
    assert flushed["syncs"] == same["syncs"] == [False, True, True]
    assert_params_close(flushed["params"], same["params"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 1])
def test_data_and_collectives(n: int) -> None:
    out = launch(workers.data_and_collectives, n=n)
    assert out["gathered"] == list(range(21))
    assert out["objects"] == [f"item{i}" for i in range(21)]
    assert out["nested"] == list(range(20))
    assert out["trigger"] == (True, False)
    if n == 1:
        assert out["batches_per_rank"][0][-1] == [18, 19, 20] and out["len"] == 7
        assert out["sum"] == out["mean"] == out["max"] == 1.0
        assert out["uneven_gather"] == [0] and out["mismatch"] == out["pad_mismatch"] == "no error"
        return
    rank0, rank1 = out["batches_per_rank"]
    assert rank1[3] == [0, 1, 2]  # ACCELERATE_API.md's even_batches example
    assert rank0 == [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]] and out["len"] == 4
    assert (out["sum"], out["mean"], out["max"]) == (3.0, 1.5, 2.0)
    assert out["broadcast"] == [5]
    assert out["scalar_gather"] == [0, 1]
    assert out["uneven_gather"] == [0, 0, 1]
    assert out["padded"] == [[1.0, -1.0], [1.0, 1.0]]
    assert out["objects_gathered"] == [0, "x", 1, "x"]
    assert out["split"] == [[0, 1, 2], [3, 4, 4]]
    assert "rank 0: [(2, 2) float32]" in out["mismatch"] and "rank 1: [(2, 3) float32]" in out["mismatch"]
    assert out["calls"] == [[1], [2]]
    assert out["many"] == [[0.0, 1.0], [0.0, 1.0]]
    assert out["pad_mismatch"].startswith("pad_across_processes: ")
    assert "rank 1: [(2, 2) float32]" in out["pad_mismatch"]


@pytest.mark.timeout(120)
def test_mixed_precision_on_cpu() -> None:
    out = launch(workers.mixed_precision_losses)
    fp32, bf16, fp16 = (torch.tensor(out[k]) for k in ("no", "bf16", "fp16"))
    torch.testing.assert_close(bf16, fp32, rtol=5e-2, atol=5e-2)
    # fp16 trains through the GradScaler; its first steps may be skipped (inf at scale 65536), so compare the
    # loss before any step and check the rest stays finite
    torch.testing.assert_close(fp16[0], fp32[0], rtol=1e-2, atol=1e-2)
    assert torch.isfinite(fp16).all()
    assert out["fp16_out_dtype"] == "torch.float32"
    assert out["skipped"] and out["unchanged"]
    assert out["norm_unscaled"] and not out["skipped_after"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("with_generator", [False, True])
@pytest.mark.parametrize("n", [2, 1])
def test_loader_resume_mid_epoch_is_exact(n: int, with_generator: bool) -> None:
    out = launch(workers.loader_resume, 2, with_generator, n=n)
    reference = out["reference"]
    assert out["saved"]["epoch"] == 1 and out["saved"]["batches_yielded"] == 2
    assert out["rest"] == reference[1][2:]
    assert out["after"] == reference[2]
    assert reference[0] != reference[1]  # epochs are shuffled differently
    assert len(set(out["seeds"])) == 1  # one base seed agreed by every rank
    if n == 2:
        r0, r1 = out["all_reference"]
        seen = sorted(i for b in r0[0] + r1[0] for i in b)
        assert seen[:22] == list(range(22)) or set(seen) == set(range(22))


@pytest.mark.timeout(120)
def test_launcher_choices_reach_the_accelerator() -> None:
    out = notebook_launcher(workers.launch_choices, (), num_processes=2, dashboard=False, mixed_precision="fp16",
                            gradient_accumulation_steps=3)
    assert (out["mp"], out["steps"], out["type"], out["scaler"]) == ("fp16", 3, "MULTI_CPU", True)
    assert out["second_mp"] == "no" and out["total"] == 2.0
