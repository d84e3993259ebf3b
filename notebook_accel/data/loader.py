"""The prepared DataLoader: sharded, one batch ahead, on the device, resumable mid-epoch.

:class:`PreparedDataLoader` is a real ``torch.utils.data.DataLoader`` whose batch sampler is this rank's
:class:`~notebook_accel.data.sharding.ShardedBatchSampler` (or whose dataset is a
:class:`~notebook_accel.data.iterable.ShardedIterableDataset`). While iterating it

- fetches one batch ahead, so it knows while yielding the last batch that it is the last (this drives the
  accumulation flush and :meth:`Accelerator.gather_for_metrics`);
- calls ``set_epoch`` on the samplers and the dataset, moves (nested) batches to the device;
- in a launched run, reports its position on every rank through :mod:`notebook_accel.progress_hook` (a
  ``Progress`` event: a deque append) at its first batch, at most every ``REPORT_SECONDS`` after it and at its
  last batch (an event per batch cost a small-item epoch ~10%: pickled, piped and drawn for nothing), and at the
  start of an epoch on the main process the epoch loop's position when the user wraps it in tqdm
  (:mod:`.epoch_bar`, :mod:`.loader_report`).

The order is the plain loader's own (see :mod:`notebook_accel.data.randomness` for how every rank is made to
draw the same one): a shuffle follows the DataLoader's ``generator``, so a prepared loader on N processes visits
exactly the plain loader's order, split across ranks. :meth:`state_dict` records the epoch, the batches done and
the samplers' generator states at the start of the epoch, which is enough to continue exactly where a run stopped.

Where the interpreter has CPython's fork-child deadlock (gh-112275), the workers are forked through
:mod:`notebook_accel.data.worker_fork`, which replaces a worker born deadlocked instead of waiting for it forever.

Loaders without automatic batching (``batch_size=None``: the dataset, or a batch sampler passed as ``sampler=``,
makes the batches) are dealt key by key, each key one step's data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from notebook_accel.data.iterable import ShardedIterableDataset, Tagged, TaggingCollate
from notebook_accel.data.loader_report import open_report
from notebook_accel.data.loader_state import Cursor, check_generator_states, check_resumable
from notebook_accel.data.randomness import SeedableRandomSampler, generators_of
from notebook_accel.data.sharding import LastRound, ShardedBatchSampler, ShardedSampler
from notebook_accel.data.worker_fork import check_importable, worker_context
from notebook_accel.monitor import steps
from notebook_accel.state import GradientState, ProcessState
from notebook_accel.utils.nested import on_device, send_to_device

__all__ = ["PreparedDataLoader", "REPORT_SECONDS"]

REPORT_SECONDS = 0.1  # the least time between two progress reports of a loader (its first and last batch always)

_ANY_SAMPLER = (ShardedBatchSampler, ShardedSampler)
_DONE = object()
_now = time.perf_counter  # the loader's clock: when a batch came, how long it took


def _worker_parts(dataset: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The user's objects a DataLoader worker gets: dataset, collate function, worker_init_fn (ours unwrapped)."""
    collate = options.get("collate_fn")
    return {"dataset": dataset.dataset if isinstance(dataset, ShardedIterableDataset) else dataset,
            "collate_fn": collate.collate if isinstance(collate, TaggingCollate) else collate,
            "worker_init_fn": options.get("worker_init_fn")}


class PreparedDataLoader(DataLoader):
    """A DataLoader over this rank's shard; see the module docstring. Built by :func:`prepare_data_loader`.

    Attributes:
        end_of_dataloader: True while the last batch of the epoch is being processed.
        remainder: real items in the last global batch (0 when nothing is padded, -1 when unknown).
        total_batch_size: items per step over all processes.
    """

    def __init__(self, dataset: Any, *, options: dict[str, Any], device: torch.device | None,
                 gradient_state: GradientState, state: ProcessState, seed: int, total_batch_size: int | None,
                 remainder: int, non_blocking: bool = False, batch_sampler: ShardedBatchSampler | None = None,
                 batch_size: int | None = None, sampler: ShardedSampler | None = None) -> None:
        workers = options.get("num_workers", 0)
        context = worker_context(workers, options.get("multiprocessing_context"))
        check_importable(workers, context, _worker_parts(dataset, options))  # spawned workers must import them
        options = {**options, "multiprocessing_context": context}  # workers deadlocked at birth are replaced
        if batch_sampler is not None:
            super().__init__(dataset, batch_sampler=batch_sampler, **options)
        elif sampler is not None:
            super().__init__(dataset, sampler=sampler, batch_size=None, **options)
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
        self._at = Cursor()  # plain slots, written per batch: DataLoader's own __setattr__ costs ~0.5 µs
        self._resume_from = 0
        self._restored = 0
        self._parent: PreparedDataLoader | None = None
        self.name: str | None = None  # what the dashboard calls this loader; None: guessed (see progress_name)
        self.training_probe: Callable[[], bool | None] | None = None  # set by the Accelerator: models in train mode?
        self.loader_index = 0  # the order in which the Accelerator prepared it
        self._user_generator = options.get("generator")
        self._generators = generators_of(self._shard_sampler, options.get("generator"))
        self._epoch_states: list[torch.Tensor] | None = None  # generator states when the current epoch began
        self._tagged_real: int | None = None  # the same, for the last padded round seen this epoch
        self._iterating = False

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
            self._at.position = 0
        self._epoch = epoch

    @property
    def _shard_sampler(self) -> ShardedBatchSampler | None:
        """The sampler that deals this rank's batches (or keys), ``None`` for an iterable dataset."""
        for candidate in (self.batch_sampler, self.sampler):
            if isinstance(candidate, _ANY_SAMPLER):
                return candidate
        return None

    @property
    def _skip(self) -> int:
        """Batches skipped at the start of every iteration (``skip_first_batches``)."""
        sharded = self._shard_sampler
        return sharded.skip if sharded is not None else 0

    @property
    def batched(self) -> bool:
        """False for a loader without automatic batching (``batch_size=None``): each step is one key's data."""
        if isinstance(self.dataset, ShardedIterableDataset):
            return self.dataset.batched
        return not isinstance(self.sampler, ShardedSampler)

    @property
    def last_round(self) -> LastRound:
        """The real keys of the current epoch's final round, once it has been dealt."""
        if isinstance(self.dataset, ShardedIterableDataset) and self.num_workers == 0:
            return self.dataset.last
        sharded = self._shard_sampler
        return sharded.last if sharded is not None else LastRound()

    @property
    def remainder(self) -> int:
        """Real keys (items; steps' data for an unbatched loader) of the last global batch, when it was padded.

        0 when nothing is padded, -1 when unknown. Known from the start when the dataset has a length and the
        batches a fixed size, and in every case once the final round has been dealt (which, since the loader
        reads one batch ahead, is before its last batch is processed).
        """
        if self._tagged_real is not None:
            return self._tagged_real
        dealt = self.last_round.real
        return dealt if dealt is not None else self._static_remainder

    @remainder.setter
    def remainder(self, value: int) -> None:
        self._static_remainder = value

    @property
    def padded_real(self) -> int | None:
        """While a batch is processed: the real keys of its global round when that round holds ``even_batches``
        repeats, else ``None``. For a map-style loader only the last round can; for an iterable dataset read by
        DataLoader workers, each worker's last round can (every worker completes its own)."""
        if self._at.round_real is not None:
            return self._at.round_real
        if self.end_of_dataloader and not isinstance(self.dataset, ShardedIterableDataset) and self.remainder > 0:
            return self.remainder
        return None

    optional_state_keys = ("dataset_state", "generator_states")

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: ``{"epoch", "batches_yielded", "seed", "num_processes"}``, plus
        ``"dataset_state"`` mid-epoch when an iterable dataset can be positioned directly (see
        :mod:`notebook_accel.data.iterable`).

        Example:
            >>> loader.state_dict()                     # doctest: +SKIP
            {'epoch': 1, 'batches_yielded': 3, 'seed': 1234, 'num_processes': 2}
        """
        state: dict[str, Any] = {"epoch": self._epoch, "batches_yielded": self._at.position, "seed": self.seed,
                                 "num_processes": self.state.num_processes}
        if self._generators:
            inside = (self._iterating or self._at.position > 0) and self._epoch_states is not None
            states = self._epoch_states if inside else [g.get_state() for g in self._generators]
            state["generator_states"] = [t.clone() for t in states or []]
        shard = self._stateful_shard()
        if shard is not None and self._at.position > 0:
            dataset_state = shard.state_before(self._at.position)  # one batch per round on every rank
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
        check_resumable(state, self.state.num_processes, bool(self._generators))
        self._epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        sharded = self._shard_sampler
        inner = getattr(getattr(sharded, "batch_sampler", None), "sampler", None)
        if isinstance(inner, SeedableRandomSampler):
            inner.seed = self.seed
        if sharded is not None and sharded.isolate_seed is not None:
            sharded.isolate_seed = self.seed
        self._load_generator_states(state.get("generator_states"))
        self._at.position = int(state["batches_yielded"])
        self._resume_from = max(0, self._at.position - self._skip)
        shard = self._stateful_shard()
        if shard is not None and state.get("dataset_state") is not None and self._resume_from:
            shard.restore(state["dataset_state"], self._at.position)  # positioned: nothing is read twice
            self._restored = self._resume_from
            self._resume_from = 0

    def _load_generator_states(self, states: Any) -> None:
        """Put the samplers' generators where they were when the saved epoch began.

        Raises:
            DataPrepareError: the saved states do not match this loader's generators.
        """
        if states is None:
            return
        check_generator_states(states, len(self._generators))
        for generator, saved in zip(self._generators, states):
            generator.set_state(saved)
        self._epoch_states = None

    # ---- iteration ------------------------------------------------------------------------------------------
    def _start_epoch(self) -> int:
        """Forward the epoch, arm the one-shot resume skip; returns the batches to skip by hand (iterables)."""
        skip, self._resume_from = self._resume_from, 0
        restored, self._restored = self._restored, 0  # batches the dataset itself was positioned past
        if self._user_generator is None:
            # DataLoader draws its workers' base seed from `generator` at every iter(), from the global torch RNG
            # when there is none. The workers' seed comes from the loader's own seed and the epoch; the global
            # RNG still gets accelerate's one draw when an epoch starts (dropout & co. and a loader prepared later
            # see what they see under accelerate), but not when a resumed run re-enters its epoch: the saved RNG
            # state already holds that epoch's draw, so a resumed run goes on as the straight one did.
            self.generator = torch.Generator().manual_seed((self.seed * 1_000_003 + self._epoch) % 2**63)
            if not (skip or restored):
                torch.empty((), dtype=torch.int64).random_()
        for target in (self.batch_sampler, self.dataset):
            set_epoch = getattr(target, "set_epoch", None)
            if set_epoch is not None:
                set_epoch(self._epoch)
        self._at.position = self._skip + skip + restored
        self._epoch_states = [g.get_state() for g in self._generators]
        if self._user_generator is not None and self._iterator is not None:
            # A persistent-workers loader reuses its worker iterator from the second epoch on, and a reused one
            # draws no workers' base seed from `generator`; a new one (the first epoch, a resumed run, a
            # skip_first_batches view) does. The same draw here keeps an epoch's shuffle the same either way.
            torch.empty((), dtype=torch.int64).random_(generator=self._user_generator)
        sharded = self._shard_sampler
        if sharded is not None:
            sharded.skip_once = skip
            return 0
        return skip

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator, not a _BaseDataLoaderIter
        manual_skip = self._start_epoch()
        self.end_of_dataloader = False
        report, total, name = open_report(self)
        epoch, rank = self._epoch + 1, self.state.process_index
        self.gradient_state.active_loaders.append(self)
        self._iterating = True
        self._tagged_real = None
        try:
            iterator = super().__iter__()
            for _ in range(manual_skip):
                next(iterator, None)
            step_clock = steps.clock()
            if step_clock is not None:
                step_clock.loader_workers = self.num_workers
            # Per batch, only locals and plain slots: this loop is all a batch pays over torch's own DataLoader.
            tagged = isinstance(self.dataset, ShardedIterableDataset)  # its collate function tags padded rounds
            device, non_blocking, at, now = self.device, self.non_blocking, self._at, _now
            cpu = device is not None and device.type == "cpu"
            next_report = 0.0  # the first batch is reported, then one every REPORT_SECONDS, and the last one
            batch: Any = _DONE  # the batch handed over next (none before the first fetch)
            real: int | None = None  # real items of its round, when that round was padded
            while True:
                started = now()
                upcoming = next(iterator, _DONE)  # one ahead: while the last batch is processed, it is known
                ready = now()
                last = upcoming is _DONE
                upcoming_real = None
                if not last:
                    if tagged and isinstance(upcoming, Tagged):
                        upcoming, upcoming_real = upcoming.batch, upcoming.real
                        self._tagged_real = upcoming_real
                    if device is not None and not on_device(upcoming, device, cpu):  # else handed over as is
                        upcoming = send_to_device(upcoming, device, non_blocking)
                if batch is not _DONE:
                    if last:
                        self.end_of_dataloader = True
                    at.position += 1
                    if report is not None and (ready >= next_report or last):
                        report(rank, at.position, total, name, epoch, "loader")
                        next_report = ready + REPORT_SECONDS
                    if real is not at.round_real:
                        at.round_real = real
                    if step_clock is not None:  # the wait just before this batch: fetching the one after it
                        step_clock.batch_ready(ready - started, ready)
                    yield batch
                if last:
                    break
                batch, real = upcoming, upcoming_real
            if step_clock is not None:
                step_clock.end_of_epoch()
            self._epoch += 1
            at.position = 0
            if self._parent is not None:  # a skip_first_batches view: the original loader moves on too
                self._parent.set_epoch(self._epoch)
        finally:
            self._iterating = False
            self._at.round_real = None
            self.end_of_dataloader = False
            if self in self.gradient_state.active_loaders:
                self.gradient_state.active_loaders.remove(self)

    def progress_name(self) -> str:
        """What the dashboard calls this loader's progress: ``name`` when set, else ``"train"`` or ``"eval"``.

        The guess, at the start of each iteration: a loop under ``torch.no_grad()`` or ``torch.inference_mode()``
        is ``"eval"`` (an evaluation that leaves the model in ``train()`` mode must not take the training loader's
        place on the dashboard); else the mode of the models prepared by the same Accelerator (any in
        ``model.train()`` -> ``"train"``, all in ``model.eval()`` -> ``"eval"``); without a prepared model, the
        first prepared loader is ``"train"`` and later ones ``"eval"`` (accelerate's usual
        ``prepare(model, optimizer, train_loader, eval_loader)`` order). Set ``loader.name = "valid"`` to choose.
        """
        if self.name:
            return self.name
        if not torch.is_grad_enabled():
            return "eval"
        training = self.training_probe() if self.training_probe is not None else None
        if training is None:
            training = self.loader_index == 0
        return "train" if training else "eval"

    def with_skip(self, num_batches: int) -> PreparedDataLoader:
        """A loader over the same shard that leaves out the first ``num_batches`` batches of every iteration.

        It replaces a pending automatic resume of this loader (so ``load_state`` followed by accelerate's
        ``skip_first_batches(loader, step)`` skips once, not twice), and when it finishes its epoch this loader
        moves to the next epoch too.
        """
        self._resume_from = 0
        sharded = self._shard_sampler
        if isinstance(sharded, ShardedSampler):
            loader = self._rebuilt(sampler=sharded.with_skip(num_batches))
        elif sharded is not None:
            loader = self._rebuilt(batch_sampler=sharded.with_skip(num_batches))
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
                                  total_batch_size=self.total_batch_size, remainder=self._static_remainder,
                                  non_blocking=self.non_blocking, **where)
