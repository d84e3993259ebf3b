"""The prepared DataLoader: sharded, one batch ahead, on the device, resumable mid-epoch.

:class:`PreparedDataLoader` is a real ``torch.utils.data.DataLoader`` whose batch sampler is this rank's
:class:`~notebook_accel.data.sharding.ShardedBatchSampler` (or whose dataset is a
:class:`~notebook_accel.data.iterable.ShardedIterableDataset`). While iterating it

- fetches one batch ahead, so it knows while yielding the last batch that it is the last (this drives the
  accumulation flush and :meth:`Accelerator.gather_for_metrics`);
- calls ``set_epoch`` on the samplers and the dataset, moves (nested) batches to the device;
- on the main process of a launched run, posts a ``Progress`` event per batch (a deque append).

Shuffling is a pure function of (base seed, epoch), the base seed agreed by every rank at prepare time, so
:meth:`state_dict` (epoch, batches done, seed) is enough to continue exactly where a run stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from notebook_accel import channel
from notebook_accel.data.iterable import ShardedIterableDataset
from notebook_accel.data.sharding import DataPrepareError, SeededShuffleSampler, ShardedBatchSampler
from notebook_accel.events import Progress
from notebook_accel.ops import broadcast_object_list
from notebook_accel.plugins import DataLoaderConfiguration
from notebook_accel.state import GradientState, ProcessState
from notebook_accel.utils.nested import send_to_device

__all__ = ["PreparedDataLoader", "prepare_data_loader"]

_STATE_KEYS = ("epoch", "batches_yielded", "seed", "num_processes")
_DONE = object()


def _loader_options(loader: DataLoader) -> dict[str, Any]:  # type: ignore[type-arg]
    """The options of ``loader`` a rebuilt DataLoader must keep (workers, collate, pinning, ...)."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    for name in ("pin_memory_device", "in_order"):
        if hasattr(loader, name):
            options[name] = getattr(loader, name)
    return options


class PreparedDataLoader(DataLoader):  # type: ignore[type-arg]
    """A DataLoader over this rank's shard; see the module docstring. Built by :func:`prepare_data_loader`.

    Attributes:
        end_of_dataloader: True while the last batch of the epoch is being processed.
        remainder: real items in the last global batch (0 when nothing is padded, -1 when unknown).
        total_batch_size: items per step over all processes.
    """

    def __init__(self, dataset: Any, *, options: dict[str, Any], device: torch.device | None,
                 gradient_state: GradientState, state: ProcessState, seed: int, total_batch_size: int | None,
                 remainder: int, non_blocking: bool = False, batch_sampler: ShardedBatchSampler | None = None,
                 batch_size: int | None = None) -> None:
        if batch_sampler is not None:
            super().__init__(dataset, batch_sampler=batch_sampler, **options)
        else:
            super().__init__(dataset, batch_size=batch_size, **options)
        self._options = options
        self.device = device
        self.non_blocking = non_blocking
        self.gradient_state = gradient_state
        self.state = state
        self.seed = seed
        self.total_batch_size = total_batch_size
        self.remainder = remainder
        self.end_of_dataloader = False
        self._epoch = 0
        self._position = 0
        self._resume_from = 0
        self._restored = 0
        self._parent: PreparedDataLoader | None = None
        self.name: str | None = None  # what the dashboard calls this loader; None: guessed (see progress_name)
        self.training_probe: Callable[[], bool | None] | None = None  # set by the Accelerator: models in train mode?
        self.loader_index = 0  # the order in which the Accelerator prepared it
        self._user_generator = options.get("generator")

    # ---- position -------------------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration runs."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch``'s permutation on the next iteration (also forwarded to samplers and dataset).

        Setting the epoch a resumed loader is already in keeps its pending mid-epoch resume; another epoch
        cancels it.
        """
        if epoch != self._epoch:
            self._resume_from = 0
            self._restored = 0
            self._position = 0
        self._epoch = epoch

    @property
    def _skip(self) -> int:
        """Batches skipped at the start of every iteration (``skip_first_batches``)."""
        return self.batch_sampler.skip if isinstance(self.batch_sampler, ShardedBatchSampler) else 0

    optional_state_keys = ("dataset_state",)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: ``{"epoch", "batches_yielded", "seed", "num_processes"}``, plus
        ``"dataset_state"`` mid-epoch when an iterable dataset can be positioned directly (see
        :mod:`notebook_accel.data.iterable`).

        Example:
            >>> loader.state_dict()                     # doctest: +SKIP
            {'epoch': 1, 'batches_yielded': 3, 'seed': 1234, 'num_processes': 2}
        """
        state = {"epoch": self._epoch, "batches_yielded": self._position, "seed": self.seed,
                 "num_processes": self.state.num_processes}
        shard = self._stateful_shard()
        if shard is not None and self._position > 0:
            dataset_state = shard.state_before(self._position)  # one batch per round on every rank
            if dataset_state is not None:
                state["dataset_state"] = dataset_state
        return state

    def _stateful_shard(self) -> ShardedIterableDataset | None:
        """The sharded iterable dataset when its dataset can be positioned directly (and no worker processes
        hold copies of it), else ``None``."""
        shard = self.dataset
        if isinstance(shard, ShardedIterableDataset) and shard.stateful and self.num_workers == 0:
            return shard
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` on the next ``iter()``: same epoch permutation, consumed batches skipped.

        Raises:
            DataPrepareError: keys missing, or a mid-epoch state saved with another number of processes.
        """
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise DataPrepareError(f"loader state is missing {missing}; expected keys {list(_STATE_KEYS)}")
        if state["batches_yielded"] and state["num_processes"] != self.state.num_processes:
            raise DataPrepareError(
                f"this loader state was saved mid-epoch with {state['num_processes']} processes; resuming with "
                f"{self.state.num_processes} would shard the epoch differently. Resume with "
                f"{state['num_processes']} processes, or from a checkpoint taken at an epoch boundary"
            )
        self._epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        for sampler in (getattr(self.batch_sampler, "batch_sampler", None),):
            inner = getattr(sampler, "sampler", None)
            if isinstance(inner, SeededShuffleSampler):
                inner.seed = self.seed
        self._position = int(state["batches_yielded"])
        self._resume_from = max(0, self._position - self._skip)
        shard = self._stateful_shard()
        if shard is not None and state.get("dataset_state") is not None and self._resume_from:
            shard.restore(state["dataset_state"], self._position)  # positioned: nothing is read twice
            self._restored = self._resume_from
            self._resume_from = 0

    # ---- iteration ------------------------------------------------------------------------------------------
    def _start_epoch(self) -> int:
        """Forward the epoch, arm the one-shot resume skip; returns the batches to skip by hand (iterables)."""
        skip, self._resume_from = self._resume_from, 0
        restored, self._restored = self._restored, 0  # batches the dataset itself was positioned past
        if self._user_generator is None:
            # DataLoader draws its workers' base seed from `generator` at every iter(), from the global torch RNG
            # when there is none: that draw would shift dropout & co. between a straight and a resumed run.
            self.generator = torch.Generator().manual_seed((self.seed * 1_000_003 + self._epoch) % 2**63)
        for target in (self.batch_sampler, self.dataset):
            set_epoch = getattr(target, "set_epoch", None)
            if set_epoch is not None:
                set_epoch(self._epoch)
        self._position = self._skip + skip + restored
        if isinstance(self.batch_sampler, ShardedBatchSampler):
            self.batch_sampler.skip_once = skip
            return 0
        return skip

    def _fetch(self, iterator: Iterator[Any]) -> Any:
        """Next batch on the device, or ``_DONE``."""
        batch = next(iterator, _DONE)
        if batch is _DONE or self.device is None:
            return batch
        return send_to_device(batch, self.device, self.non_blocking)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator, not a _BaseDataLoaderIter
        manual_skip = self._start_epoch()
        self.end_of_dataloader = False
        writer = channel.current() if self.state.is_main_process else None
        total = self._total_or_none() if writer is not None else None
        name = self.progress_name() if writer is not None else ""
        epoch = self._epoch + 1
        self.gradient_state.active_loaders.append(self)
        try:
            iterator = super().__iter__()
            for _ in range(manual_skip):
                next(iterator, None)
            current = self._fetch(iterator)
            while current is not _DONE:
                upcoming = self._fetch(iterator)
                self.end_of_dataloader = upcoming is _DONE
                self._position += 1
                if writer is not None:
                    writer.post(Progress(self.state.process_index, self._position, total, name, time.time(),
                                         epoch, "loader"))
                yield current
                current = upcoming
            self._epoch += 1
            self._position = 0
            if self._parent is not None:  # a skip_first_batches view: the original loader moves on too
                self._parent.set_epoch(self._epoch)
        finally:
            self.end_of_dataloader = False
            if self in self.gradient_state.active_loaders:
                self.gradient_state.active_loaders.remove(self)

    def progress_name(self) -> str:
        """What the dashboard calls this loader's progress: ``name`` when set, else ``"train"`` or ``"eval"``.

        The guess, at the start of each iteration: the mode of the models prepared by the same Accelerator
        (any in ``model.train()`` -> ``"train"``, all in ``model.eval()`` -> ``"eval"``); without a prepared
        model, the first prepared loader is ``"train"`` and later ones ``"eval"`` (accelerate's usual
        ``prepare(model, optimizer, train_loader, eval_loader)`` order). Set ``loader.name = "valid"`` to choose.
        """
        if self.name:
            return self.name
        training = self.training_probe() if self.training_probe is not None else None
        if training is None:
            training = self.loader_index == 0
        return "train" if training else "eval"

    def _total_or_none(self) -> int | None:
        """Batches per epoch, or ``None`` when unknown."""
        try:
            return self._skip + len(self)
        except TypeError:
            return None

    def with_skip(self, num_batches: int) -> PreparedDataLoader:
        """A loader over the same shard that leaves out the first ``num_batches`` batches of every iteration.

        It replaces a pending automatic resume of this loader (so ``load_state`` followed by accelerate's
        ``skip_first_batches(loader, step)`` skips once, not twice), and when it finishes its epoch this loader
        moves to the next epoch too.
        """
        self._resume_from = 0
        if isinstance(self.batch_sampler, ShardedBatchSampler):
            old = self.batch_sampler
            sampler = ShardedBatchSampler(old.batch_sampler, old.rank, old.num_processes, old.split_batches,
                                          old.even_batches, skip=num_batches)
            loader = self._rebuilt(batch_sampler=sampler)
        else:
            loader = self._rebuilt(batch_size=self.batch_size)
            loader._resume_from = num_batches  # iterable datasets: skip by reading, once
        loader._epoch = self._epoch
        loader._parent = self
        loader.name, loader.training_probe, loader.loader_index = self.name, self.training_probe, self.loader_index
        return loader

    def _rebuilt(self, **where: Any) -> PreparedDataLoader:
        """A copy of this loader with another batch sampler (or batch size)."""
        return PreparedDataLoader(self.dataset, options=self._options, device=self.device,
                                  gradient_state=self.gradient_state, state=self.state, seed=self.seed,
                                  total_batch_size=self.total_batch_size, remainder=self.remainder,
                                  non_blocking=self.non_blocking, **where)


def _agree_seed(loader: DataLoader, config: DataLoaderConfiguration) -> int:  # type: ignore[type-arg]
    """The shuffle base seed: ``config.data_seed``, else drawn on every rank (keeping RNGs in step), rank 0's kept."""
    if config.data_seed is not None:
        return config.data_seed
    generator = loader.generator or getattr(loader.sampler, "generator", None)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    return int(broadcast_object_list([seed], from_process=0)[0])


def _remainder(length: int | None, global_batch: int | None, drop_last: bool, config: DataLoaderConfiguration,
               num_processes: int) -> int:
    """Real items in the padded last global batch: 0 when nothing is padded, -1 when unknown."""
    if drop_last or not config.even_batches or num_processes == 1:
        return 0
    if length is None or global_batch is None:
        return -1
    return length % global_batch


def prepare_data_loader(loader: DataLoader, state: ProcessState,  # type: ignore[type-arg]
                        gradient_state: GradientState, config: DataLoaderConfiguration,
                        device_placement: bool = True) -> PreparedDataLoader:
    """This rank's sharded, device-placing, resumable version of ``loader``.

    Raises:
        DataPrepareError: a loader without automatic batching (``batch_size=None``), or a batch size that
            ``split_batches`` cannot divide.

    Example:
        >>> from notebook_accel.state import ProcessState, GradientState
        >>> dl = prepare_data_loader(DataLoader(range(6), batch_size=2), ProcessState(cpu=True), GradientState(),
        ...                          DataLoaderConfiguration())
        >>> [b.tolist() for b in dl]
        [[0, 1], [2, 3], [4, 5]]
    """
    if isinstance(loader, PreparedDataLoader):
        return loader
    common: dict[str, Any] = {"options": _loader_options(loader), "state": state, "gradient_state": gradient_state,
                              "device": state.device if device_placement else None,
                              "non_blocking": config.non_blocking}
    if isinstance(loader.dataset, IterableDataset):
        return _prepare_iterable(loader, state.num_processes, state.process_index, config, common)
    return _prepare_map(loader, state.num_processes, state.process_index, config, common)


def _length(dataset: Any) -> int | None:
    """``len(dataset)``, or ``None`` when it has none."""
    return len(dataset) if hasattr(dataset, "__len__") else None


def _prepare_iterable(loader: DataLoader, n: int, rank: int, config: DataLoaderConfiguration,  # type: ignore[type-arg]
                      common: dict[str, Any]) -> PreparedDataLoader:
    """An IterableDataset loader: shard the items, batch them per process."""
    if loader.batch_size is None:
        raise DataPrepareError("cannot shard an IterableDataset loader with batch_size=None; give it a batch_size")
    if config.split_batches and loader.batch_size % n:
        raise DataPrepareError(f"split_batches=True needs batch_size={loader.batch_size} divisible by {n}")
    shard = ShardedIterableDataset(loader.dataset, loader.batch_size, n, rank, loader.drop_last,
                                   config.split_batches, config.even_batches)
    remainder = _remainder(_length(loader.dataset), shard.global_batch, loader.drop_last, config, n)
    return PreparedDataLoader(shard, batch_size=shard.per_process_batch, seed=config.data_seed or 0,
                              total_batch_size=shard.global_batch, remainder=remainder, **common)


def _prepare_map(loader: DataLoader, n: int, rank: int, config: DataLoaderConfiguration,  # type: ignore[type-arg]
                 common: dict[str, Any]) -> PreparedDataLoader:
    """A map-style loader: shard its batch sampler; a plain shuffle becomes a (seed, epoch) permutation."""
    base = loader.batch_sampler
    if base is None:
        raise DataPrepareError(
            "cannot shard a DataLoader with batch_size=None (no automatic batching); give it a batch_size or a "
            "batch_sampler"
        )
    sampler = loader.sampler
    seed = config.data_seed or 0
    plain_shuffle = isinstance(sampler, RandomSampler) and not sampler.replacement and sampler._num_samples is None
    if type(base) is BatchSampler and plain_shuffle:
        seed = _agree_seed(loader, config)
        base = BatchSampler(SeededShuffleSampler(loader.dataset, seed), base.batch_size, base.drop_last)
    sharded = ShardedBatchSampler(base, rank, n, config.split_batches, config.even_batches)
    size = sharded.batch_size
    global_batch = None if size is None else (size if config.split_batches else size * n)
    remainder = _remainder(_length(loader.dataset), global_batch, sharded.drop_last, config, n)
    return PreparedDataLoader(loader.dataset, batch_sampler=sharded, seed=seed, total_batch_size=global_batch,
                              remainder=remainder, **common)
