"""Where a DataLoader's order comes from, and how every rank is made to draw the same one.

A prepared loader deals out the batches of the user's own batch sampler, so all ranks must draw the same
sequence of batches from it before the split, or items are silently lost and repeated. The randomness of a
sampler has one of three sources, each handled here:

- **A torch.Generator it holds** (``RandomSampler(generator=g)``, ``DataLoader(shuffle=True, generator=g)``,
  ``WeightedRandomSampler``, ``SubsetRandomSampler``): kept, so the prepared order is the plain loader's order;
  rank 0's generator state is copied to every rank at prepare time (:func:`sync_generators`), and its state at
  the start of each epoch goes into the loader's checkpoint.
- **None, on one of torch's samplers** (``RandomSampler(ds)``, which draws a seed from each rank's own global
  RNG): given a generator seeded with the seed all ranks agreed on (:func:`attach_generators`).
- **Unknown** (a sampler class of the user's own, which may call ``torch.randperm``, ``random.shuffle`` or
  ``numpy.random``): every ``next()`` of it runs on a private random stream seeded by (agreed seed, epoch)
  (:class:`IsolatedRandomness`), the same on every rank and again on resume; the global RNGs are untouched.

:class:`SeedableRandomSampler` is accelerate's ``use_seedable_sampler=True`` sampler: a permutation that is a
pure function of ``(initial_seed, epoch)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from notebook_accel.ops import broadcast_object_list

__all__ = [
    "IsolatedRandomness",
    "SeedableRandomSampler",
    "attach_generators",
    "draws_from_global_rng",
    "generators_of",
    "has_unknown_randomness",
    "seedable_parts",
    "sync_generators",
]

# torch's samplers whose only randomness is their ``generator`` attribute (None: the global RNG).
_GENERATOR_SAMPLERS = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)
# Samplers known to hold no randomness of their own (a batch sampler's randomness is in its inner sampler).
_DETERMINISTIC = (SequentialSampler, BatchSampler, range, list, tuple)


def _parts(sampler: Any) -> list[Any]:
    """``sampler`` and the samplers it wraps (``.sampler``, ``.batch_sampler``), outermost first, each once."""
    seen: list[Any] = []
    todo = [sampler]
    while todo:
        item = todo.pop(0)
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [getattr(item, "sampler", None), getattr(item, "batch_sampler", None)]
    return seen


def generators_of(*samplers: Any) -> list[torch.Generator]:
    """Every distinct ``torch.Generator`` among ``samplers`` or held as ``.generator`` by them or the samplers they
    wrap."""
    found: list[torch.Generator] = []
    for sampler in samplers:
        if isinstance(sampler, torch.Generator):  # the DataLoader's own (its workers' seeds are drawn from it)
            if not any(sampler is g for g in found):
                found.append(sampler)
            continue
        for part in _parts(sampler):
            generator = getattr(part, "generator", None)
            if isinstance(generator, torch.Generator) and not any(generator is g for g in found):
                found.append(generator)
    return found


def attach_generators(sampler: Any, seed: int) -> int:
    """Give each of torch's random samplers inside ``sampler`` that draws from the global RNG a generator
    seeded with ``seed`` (distinct per sampler); returns how many were given one."""
    attached = 0
    for part in _parts(sampler):
        if isinstance(part, _GENERATOR_SAMPLERS) and part.generator is None:
            part.generator = torch.Generator().manual_seed((seed + 7919 * attached) % 2**63)
            attached += 1
    return attached


def draws_from_global_rng(sampler: Any) -> bool:
    """True when one of torch's random samplers inside ``sampler`` has no generator (it would draw its
    permutation from each rank's global RNG; :func:`attach_generators` gives it one)."""
    return any(isinstance(p, _GENERATOR_SAMPLERS) and p.generator is None for p in _parts(sampler))


def has_unknown_randomness(sampler: Any) -> bool:
    """True when some part of ``sampler`` is neither one of torch's samplers nor generator-driven, so its
    order may come from a global RNG (see :class:`IsolatedRandomness`)."""
    for part in _parts(sampler):
        if isinstance(part, (*_GENERATOR_SAMPLERS, *_DETERMINISTIC, SeedableRandomSampler)):
            continue
        if isinstance(getattr(part, "generator", None), torch.Generator):
            continue
        return True
    return False


def sync_generators(generators: list[torch.Generator]) -> None:
    """Copy rank 0's state of each generator to every rank (a no-op on one process; one broadcast otherwise)."""
    if not generators:
        return
    states = broadcast_object_list([[g.get_state() for g in generators]], from_process=0)[0]
    for generator, state in zip(generators, states):
        generator.set_state(state)


class IsolatedRandomness:
    """A private random stream (torch CPU, ``random`` and numpy) that wraps the ``next()`` calls of an iterator.

    Each call swaps the stream's state into the global generators, advances the iterator, and swaps the global
    state back, so the iterator sees a stream that depends only on ``seed`` while the training code's own
    random numbers are not touched.

    Example:
        >>> import random
        >>> draws = lambda: iter(random.random, None)
        >>> first = next(IsolatedRandomness(5).wrap(draws()))
        >>> first == next(IsolatedRandomness(5).wrap(draws()))  # the same stream for the same seed
        True
    """

    def __init__(self, seed: int) -> None:
        saved = _global_state()
        try:
            torch.manual_seed(seed % 2**63)
            random.seed(seed)
            _numpy_seed(seed)
            self._state = _global_state()
        finally:
            _set_global_state(saved)

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable``'s items, its ``iter()`` and every step drawn from this stream."""
        iterator: Iterator[Any] | None = None
        while True:
            saved = _global_state()
            _set_global_state(self._state)
            try:
                if iterator is None:
                    iterator = iter(iterable)  # a plain __iter__ may draw its whole order here
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self._state = _global_state()
                _set_global_state(saved)
            yield item


def _numpy_seed(seed: int) -> None:
    """Seed numpy's global RNG when numpy is importable."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    numpy.random.seed(seed % 2**32)


def _global_state() -> tuple[Any, Any, Any]:
    """The torch CPU, ``random`` and numpy global RNG states."""
    try:
        import numpy

        numpy_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover
        numpy_state = None
    return torch.get_rng_state(), random.getstate(), numpy_state


def _set_global_state(state: tuple[Any, Any, Any]) -> None:
    """Restore what :func:`_global_state` returned."""
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    if state[2] is not None:
        import numpy

        numpy.random.set_state(state[2])


class SeedableRandomSampler(RandomSampler):
    """A random sampler whose permutation is a pure function of ``(initial_seed, epoch)`` (accelerate's class of
    the same name, for ``use_seedable_sampler=True``): the same on every rank and after a resume, whatever the
    global RNG did. As in accelerate, an iteration that runs to the end moves on to the next epoch by itself, and
    :meth:`set_epoch` chooses one.

    Args:
        data_source: the dataset.
        replacement, num_samples: as for ``RandomSampler``.
        generator: the generator re-seeded at every epoch (a new one when ``None``).
        initial_seed: base seed; ``data_seed`` is accepted as accelerate's name for it. Default: torch's initial
            seed (:func:`torch.initial_seed`, what ``set_seed`` set). A prepared loader makes rank 0's seed
            everyone's.

    Example:
        >>> s = SeedableRandomSampler(range(5), initial_seed=1)
        >>> first = list(s)
        >>> list(s) != first and s.epoch == 2   # each full pass moves to the next epoch
        True
        >>> s.set_epoch(0)
        >>> list(s) == first
        True
    """

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: torch.Generator | None = None, initial_seed: int | None = None,
                 data_seed: int | None = None) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples,
                         generator=generator or torch.Generator())
        chosen = initial_seed if initial_seed is not None else data_seed
        self.initial_seed = int(chosen) if chosen is not None else int(torch.initial_seed())
        self.epoch = 0

    @property
    def seed(self) -> int:
        """The base seed (the older name of :attr:`initial_seed`)."""
        return self.initial_seed

    @seed.setter
    def seed(self, value: int) -> None:
        self.initial_seed = int(value)

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch``."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:  # someone cleared it: draw from a fresh one, still a function of the seed
            self.generator = torch.Generator()
        self.generator.manual_seed((self.initial_seed + self.epoch) % 2**63)
        yield from super().__iter__()
        self.epoch += 1


def seedable_parts(sampler: Any) -> list[SeedableRandomSampler]:
    """The :class:`SeedableRandomSampler` instances inside ``sampler`` (their seeds are agreed at prepare)."""
    return [part for part in _parts(sampler) if isinstance(part, SeedableRandomSampler)]


def seedable_copy(sampler: RandomSampler, seed: int) -> SeedableRandomSampler:
    """A :class:`SeedableRandomSampler` with the options of ``sampler``."""
    return SeedableRandomSampler(sampler.data_source, sampler.replacement, sampler._num_samples,
                                 initial_seed=seed)


def flatten_keys(batches: Iterable[list[Any]]) -> Iterator[Any]:
    """The single keys of batches of one (for loaders without automatic batching)."""
    for batch in batches:
        yield from batch
