"""A plain shuffle's order as one tensor: the sampler's own indices and generator draws, or no fast path at all."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import RandomSampler, SequentialSampler

from notebook_accel.data import shuffle_order as module
from notebook_accel.data.randomness import SeedableRandomSampler
from notebook_accel.data.shuffle_order import matches_this_torch, shuffle_order


def test_the_order_and_the_draws_after_it_are_the_samplers_own() -> None:
    assert matches_this_torch()
    ours, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(3):
        drawn = shuffle_order(RandomSampler(range(50), generator=ours))
        assert drawn is not None
        order, finish = drawn
        assert order.tolist() == list(RandomSampler(range(50), generator=theirs))
        finish()
        assert torch.equal(ours.get_state(), theirs.get_state())


@pytest.mark.parametrize("sampler", [
    SequentialSampler(range(5)),
    RandomSampler(range(5)),  # no generator: torch draws a seed from the global RNG
    RandomSampler(range(5), replacement=True, generator=torch.Generator()),
    RandomSampler(range(5), num_samples=12, generator=torch.Generator()),
    SeedableRandomSampler(range(5), initial_seed=1),  # re-seeds itself per epoch: read index by index
])
def test_other_samplers_are_read_index_by_index(sampler: object) -> None:
    assert shuffle_order(sampler) is None


def test_without_a_match_on_this_torch_nobody_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "matches_this_torch", lambda: False)
    assert shuffle_order(RandomSampler(range(5), generator=torch.Generator())) is None
