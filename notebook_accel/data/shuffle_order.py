"""A plain shuffle's whole epoch order at once, as one tensor, drawn exactly as ``RandomSampler`` draws it.

``DataLoader(shuffle=True)`` makes a ``RandomSampler``, a generator that yields a ``randperm`` one index at a time.
A prepared loader on ``n`` processes reads the whole epoch's order on every rank (each rank keeps its own
batches), so on a small-item dataset resuming that generator once per index is a visible share of an epoch
(about 3% at 200,000 items). :func:`shuffle_order` returns the same indices as one tensor (a rank turns only its
own share into Python ints: that conversion, not the draw, is the bulk of an epoch's sampling), plus the draws
``RandomSampler`` makes from its generator once the indices run out, to be made when the caller's pass ends
(a pass given up early leaves the generator where the sampler itself would have left it).

The draws follow torch's ``RandomSampler.__iter__`` (a ``randperm`` per full pass over the data, then one for the
remaining part); :func:`matches_this_torch` checks that once per process on a tiny sampler, and without a match
(another torch) nobody takes this path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import RandomSampler

__all__ = ["shuffle_order", "matches_this_torch"]


def shuffle_order(sampler: Any) -> tuple[torch.Tensor, Callable[[], None]] | None:
    """``(the indices sampler's next pass yields, a function making its draws after the last index)``, drawn
    from ``sampler.generator``, or ``None`` when ``sampler`` is not torch's own ``RandomSampler`` without
    replacement over the whole dataset with a generator (any other sampler is read index by index).

    Example:
        >>> s = RandomSampler(range(4), generator=torch.Generator().manual_seed(0))
        >>> order, finish = shuffle_order(s)
        >>> sorted(order.tolist())
        [0, 1, 2, 3]
    """
    if not _plain(sampler) or not matches_this_torch():
        return None
    return _draw(sampler)


def _plain(sampler: Any) -> bool:
    """torch's own RandomSampler without replacement, over the whole dataset, with a generator."""
    return (type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None
            and isinstance(sampler.generator, torch.Generator))


def _draw(sampler: RandomSampler) -> tuple[torch.Tensor, Callable[[], None]]:
    """The draws of ``RandomSampler.__iter__`` for ``num_samples == len(data_source)``: one full ``randperm``
    now, and the empty remainder's ``randperm`` (still a draw) when the pass ends."""
    n = len(sampler.data_source)
    generator = sampler.generator
    order = torch.randperm(n, generator=generator)

    def finish() -> None:
        torch.randperm(n, generator=generator)  # RandomSampler yields none of these; the draw still counts

    return order, finish


@functools.cache
def matches_this_torch() -> bool:
    """True when this torch's ``RandomSampler`` yields what :func:`shuffle_order` gives and leaves its generator
    in the same state (checked once, on 5 items)."""
    their_generator, our_generator = torch.Generator().manual_seed(1234), torch.Generator().manual_seed(1234)
    expected = list(RandomSampler(range(5), generator=their_generator))
    order, finish = _draw(RandomSampler(range(5), generator=our_generator))
    finish()
    return expected == order.tolist() and torch.equal(their_generator.get_state(), our_generator.get_state())
