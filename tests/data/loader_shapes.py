"""Every DataLoader shape we can think of, prepared on every rank and counted item by item.

:func:`count_every_item` runs on each rank of a real launch (gloo on CPU). Each rank is seeded differently (as in
real runs), so a sampler whose randomness is not the same on every rank would lose and repeat items. For every
shape and two epochs, every rank records the item ids of each batch it got and what ``gather_for_metrics``
returned; rank 0 puts them together and checks:

- coverage: across ranks, each item of the epoch exactly once, plus only the documented ``even_batches``
  padding (the last round completed from the start of the epoch), or minus only the incomplete last round
  (``drop_last``);
- ``gather_for_metrics``: over the epoch, exactly the epoch's items, each once (padding dropped);
- order: for a loader whose shuffle follows a seeded generator, the ranks' batches put back in round order are the
  plain loader's batches.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    get_worker_info,
)

from notebook_accel import Accelerator, DataLoaderConfiguration
from notebook_accel.ops import gather_object

LENGTH = 23  # prime: every batch size and world size leaves a tail


class Items(Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``tensor(i)``; a list of indices gives a batch (for a batch sampler passed as sampler)."""

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: Any) -> torch.Tensor:
        return torch.tensor(index)


class Stream(IterableDataset):  # type: ignore[type-arg]
    """``tensor(0) ... tensor(LENGTH-1)`` in order; split between DataLoader workers when there are some."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (torch.tensor(i) for i in range(start, LENGTH, step))


class SizedStream(Stream):
    """A :class:`Stream` that also has a length."""

    def __len__(self) -> int:
        return LENGTH


class TorchRandperm(Sampler[int]):
    """A user's sampler drawing its order from the global torch RNG (different on every rank)."""

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(LENGTH).tolist())

    def __len__(self) -> int:
        return LENGTH


class PythonShuffle(Sampler[int]):
    """A user's sampler drawing its order from Python's ``random`` module, item by item."""

    def __iter__(self) -> Iterator[int]:
        pool = list(range(LENGTH))
        while pool:
            yield pool.pop(random.randrange(len(pool)))

    def __len__(self) -> int:
        return LENGTH


class RaggedBatches(Sampler[list[int]]):
    """A user's batch sampler: a torch-RNG permutation cut into batches of 1 to 4 items (numpy-free, no length)."""

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(LENGTH).tolist()
        while order:
            size = int(torch.randint(1, 5, (1,)).item())
            yield order[:size]
            order = order[size:]


@dataclass(frozen=True)
class Shape:
    """One way of building a DataLoader and preparing it."""

    source: str  # map | iterable | sized_iterable
    sampler: str  # sequential | shuffle | shuffle_generator | random_in_batch_sampler | torch_randperm |
    # python_random | subset | ragged_batches | batch_sampler_as_sampler
    batch_size: int | None
    drop_last: bool
    even_batches: bool
    split_batches: bool
    num_workers: int = 0

    def loader(self) -> DataLoader:  # type: ignore[type-arg]
        """The plain DataLoader of this shape."""
        common: dict[str, Any] = {"num_workers": self.num_workers}
        if self.source != "map":
            dataset = Stream() if self.source == "iterable" else SizedStream()
            return DataLoader(dataset, batch_size=self.batch_size, drop_last=self.drop_last, **common)
        batch, drop = self.batch_size, self.drop_last
        if self.sampler == "shuffle":
            return DataLoader(Items(), batch_size=batch, shuffle=True, drop_last=drop, **common)
        if self.sampler == "shuffle_generator":
            return DataLoader(Items(), batch_size=batch, shuffle=True, drop_last=drop,
                              generator=torch.Generator().manual_seed(0), **common)
        if self.sampler == "random_in_batch_sampler":
            return DataLoader(Items(), batch_sampler=BatchSampler(RandomSampler(Items()), batch or 1, drop), **common)
        if self.sampler == "ragged_batches":
            return DataLoader(Items(), batch_sampler=RaggedBatches(), **common)
        if self.sampler == "batch_sampler_as_sampler":
            as_sampler = BatchSampler(RandomSampler(Items()), 4, False)
            return DataLoader(Items(), sampler=as_sampler, batch_size=None, **common)
        samplers = {"sequential": SequentialSampler(Items()), "torch_randperm": TorchRandperm(),
                    "python_random": PythonShuffle(), "subset": SubsetRandomSampler(range(0, LENGTH, 2))}
        return DataLoader(Items(), sampler=samplers[self.sampler], batch_size=batch, drop_last=drop, **common)

    def items(self) -> list[int]:
        """Every item one epoch of the plain loader visits once."""
        return list(range(0, LENGTH, 2)) if self.sampler == "subset" else list(range(LENGTH))

    def batch_per_step(self) -> int | None:
        """Items per batch for this shape (``None``: varies)."""
        if self.sampler in ("ragged_batches", "batch_sampler_as_sampler") or self.batch_size is None:
            return None
        return self.batch_size


def shapes(world: int) -> list[Shape]:
    """Every valid shape for ``world`` processes."""
    found = []
    map_samplers = ["sequential", "shuffle", "shuffle_generator", "random_in_batch_sampler", "torch_randperm",
                    "python_random", "subset", "ragged_batches", "batch_sampler_as_sampler"]
    # the batch sampler decides the batch size for the last three: one variant each
    sizes = {"random_in_batch_sampler": [3, 6], "ragged_batches": [3], "batch_sampler_as_sampler": [None]}
    for source, sampler in [("map", s) for s in map_samplers] + [("iterable", "-"), ("sized_iterable", "-")]:
        for batch, drop, even, split in itertools.product(sizes.get(sampler, [3, 6, None]), [False, True],
                                                          [True, False], [False, True]):
            fixed = sampler not in ("ragged_batches", "batch_sampler_as_sampler")
            if split and (batch is None or not fixed or batch % world):
                continue  # split_batches slices fixed-size batches only
            if drop and (batch is None or sampler == "ragged_batches"):
                continue  # drop_last means nothing without batching (or to a batch sampler of one's own)
            found.append(Shape(source, sampler, batch, drop, even, split))
    found += [Shape("map", "shuffle", 3, False, True, False, num_workers=2),
              Shape("map", "random_in_batch_sampler", 3, False, True, False, num_workers=2)]
    # a stream split between two DataLoader workers: each worker's share is dealt (and completed) on its own
    found += [Shape(source, "-", batch, False, even, False, num_workers=2)
              for source in ("iterable", "sized_iterable") for batch in (3, None) for even in (True, False)]
    return found


def _ids(batch: Any) -> list[int]:
    """The item ids of a batch (a tensor of ids, or one id)."""
    return [int(v) for v in torch.as_tensor(batch).reshape(-1).tolist()]


def count_every_item() -> dict[str, Any]:
    """Prepare every shape on every rank, run two epochs, return rank 0's list of problems (empty: all good)."""
    accelerators: dict[tuple[bool, bool], Accelerator] = {(True, False): Accelerator()}
    rank, world = accelerators[True, False].process_index, accelerators[True, False].num_processes
    torch.manual_seed(1000 + rank)  # ranks seeded differently, as in real runs
    random.seed(2000 + rank)
    problems: list[str] = []
    checked = 0
    for shape in shapes(world):
        key = (shape.even_batches, shape.split_batches)
        if key not in accelerators:
            config = DataLoaderConfiguration(even_batches=key[0], split_batches=key[1])
            accelerators[key] = Accelerator(dataloader_config=config)
        accelerator = accelerators[key]
        loader = accelerator.prepare(shape.loader())
        epochs = []
        for _ in range(2):
            mine: list[list[int]] = []
            gathered: list[int] = []
            for batch in loader:
                mine.append(_ids(batch))
                if shape.even_batches or world == 1:  # equal step counts on every rank
                    gathered += _ids(accelerator.gather_for_metrics(batch))
            epochs.append((mine, gathered))
        everyone = gather_object([epochs])
        if rank == 0:
            problems += _check(shape, everyone, world)
            checked += 1
    return {"problems": problems, "shapes": checked, "world": world}


def _check(shape: Shape, ranks: list[Any], world: int) -> list[str]:
    """The problems with what ``ranks`` (each rank's two epochs) got for ``shape``."""
    out = []
    plain_loader = shape.loader()
    plain = [[_ids(b) for b in plain_loader] for _ in range(2)]  # the plain loader's two epochs
    for epoch in range(2):
        name = f"{shape} epoch {epoch}"
        per_rank = [r[epoch][0] for r in ranks]
        seen = Counter(i for batches in per_rank for b in batches for i in b)
        expected = Counter(shape.items())
        missing, extra = expected - seen, seen - expected
        step = shape.batch_per_step()
        round_size = (step if shape.split_batches else step * world) if step else 4 * world
        if shape.drop_last:
            if extra:
                out.append(f"{name}: drop_last repeated items {sorted(extra.elements())}")
            if sum(missing.values()) >= round_size:
                out.append(f"{name}: drop_last dropped {sum(missing.values())} items (less than {round_size})")
        else:
            if missing:
                out.append(f"{name}: items never seen {sorted(missing.elements())}")
            if extra and (not shape.even_batches or world == 1):
                out.append(f"{name}: items repeated without padding {sorted(extra.elements())}")
            if sum(extra.values()) >= round_size * max(1, shape.num_workers if shape.source != "map" else 1):
                out.append(f"{name}: more padding than one round (per worker): {sorted(extra.elements())}")
        counts = {len(r) for r in per_rank}
        if shape.even_batches and len(counts) > 1:
            out.append(f"{name}: ranks ran different numbers of batches {sorted(counts)}")
        gathered = Counter(ranks[0][epoch][1])
        if (shape.even_batches or world == 1) and not shape.drop_last and gathered != expected:
            out.append(f"{name}: gather_for_metrics gave {sum(gathered.values())} items, missing "
                       f"{sorted((expected - gathered).elements())}, extra {sorted((gathered - expected).elements())}")
        if shape.sampler == "shuffle_generator" and not shape.split_batches:
            dealt = [per_rank[r][k] for k in range(max(counts)) for r in range(world) if k < len(per_rank[r])]
            full = (len(plain[epoch]) - 1) // world * world  # whole rounds before the last one
            if dealt[:full] != plain[epoch][:full]:
                out.append(f"{name}: order differs from the plain loader's: {dealt[:3]} vs {plain[epoch][:3]}")
    return out
