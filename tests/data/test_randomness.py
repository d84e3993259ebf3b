"""Where a loader's order comes from: generators found, attached and synced; private streams for custom samplers."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, WeightedRandomSampler

from notebook_accel.data.randomness import (
    IsolatedRandomness,
    SeedableRandomSampler,
    attach_generators,
    draws_from_global_rng,
    generators_of,
    has_unknown_randomness,
    sync_generators,
)


class GlobalShuffle(torch.utils.data.Sampler[int]):
    """Draws from all three global RNGs."""

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(6).tolist()
        random.shuffle(order)
        numpy.random.shuffle(order)
        return iter(order)

    def __len__(self) -> int:
        return 6


def test_generators_are_found_through_batch_samplers_once_each() -> None:
    g = torch.Generator()
    batch = BatchSampler(RandomSampler(range(4), generator=g), 2, False)
    assert generators_of(batch, g) == [g]
    assert generators_of(BatchSampler(SequentialSampler(range(4)), 2, False)) == []
    own = torch.Generator()
    assert generators_of(batch, own, g) == [g, own]  # a DataLoader's own generator counts too


def test_samplers_drawing_from_the_global_rng_get_distinct_seeded_generators() -> None:
    inner = RandomSampler(range(4))
    weighted = WeightedRandomSampler([1.0, 2.0], 4)
    assert draws_from_global_rng(BatchSampler(inner, 2, False)) and draws_from_global_rng(weighted)
    assert attach_generators(BatchSampler(inner, 2, False), seed=3) == 1
    assert not draws_from_global_rng(inner)
    again = RandomSampler(range(4))
    attach_generators(again, seed=3)
    assert list(again) == list(RandomSampler(range(4), generator=torch.Generator().manual_seed(3)))


def test_unknown_randomness_is_only_a_sampler_class_of_ones_own() -> None:
    assert not has_unknown_randomness(BatchSampler(RandomSampler(range(3)), 2, False))
    assert not has_unknown_randomness(SeedableRandomSampler(range(3)))
    assert has_unknown_randomness(BatchSampler(GlobalShuffle(), 2, False))


def test_an_isolated_stream_repeats_for_a_seed_and_leaves_the_global_rngs_alone() -> None:
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    before = (torch.rand(1), random.random(), numpy.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    first = list(IsolatedRandomness(7).wrap(GlobalShuffle()))
    assert first == list(IsolatedRandomness(7).wrap(GlobalShuffle()))
    assert first != list(IsolatedRandomness(8).wrap(GlobalShuffle()))
    assert (torch.rand(1), random.random(), numpy.random.rand()) == before  # untouched by the three draws


def test_sync_on_one_process_keeps_the_state() -> None:
    g = torch.Generator().manual_seed(4)
    state = g.get_state()
    sync_generators([g])
    assert torch.equal(g.get_state(), state)


def test_seedable_sampler_is_a_function_of_seed_and_epoch() -> None:
    a, b = SeedableRandomSampler(range(8), initial_seed=1), SeedableRandomSampler(range(8), data_seed=1)
    first = list(a)
    assert first == list(b) and a.epoch == b.epoch == 1  # a whole pass moves on to the next epoch, as accelerate's
    second = list(a)
    assert second != first and sorted(second) == list(range(8))
    a.set_epoch(0)
    assert list(a) == first
    a.seed = 2
    assert a.initial_seed == 2
    torch.manual_seed(77)
    assert SeedableRandomSampler(range(3)).initial_seed == 77  # torch's initial seed by default, as accelerate's
