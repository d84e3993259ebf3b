"""The prepared loader in one process: sharding (with a stand-in rank), look-ahead, resume, progress, errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from notebook_accel import channel
from notebook_accel.data import loader as loader_module
from notebook_accel.data import DataPrepareError, PreparedDataLoader, prepare_data_loader, skip_first_batches
from notebook_accel.events import Progress
from notebook_accel.plugins import DataLoaderConfiguration
from notebook_accel.state import GradientState


@dataclass
class FakeState:
    """Just what a loader reads from the process state (no process group needed)."""

    process_index: int = 0
    num_processes: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0


def _prepare(loader: DataLoader, rank: int = 0, n: int = 1, gs: GradientState | None = None,
             **config: Any) -> PreparedDataLoader:
    return prepare_data_loader(loader, FakeState(rank, n), gs or GradientState(),  # type: ignore[arg-type]
                               DataLoaderConfiguration(**config))


def test_shards_like_accelerate_and_knows_its_last_batch() -> None:
    gs = GradientState()
    loader = _prepare(DataLoader(torch.arange(21), batch_size=3), rank=1, n=2, gs=gs)
    ends = []
    batches = []
    for batch in loader:
        batches.append(batch.tolist())
        ends.append((gs.end_of_dataloader, gs.remainder))
    assert batches[-1] == [0, 1, 2] and len(loader) == 4 and loader.total_batch_size == 6
    assert ends == [(False, 3)] * 3 + [(True, 3)]
    assert not gs.in_dataloader and not loader.end_of_dataloader


def test_remainder_is_zero_without_padding() -> None:
    assert _prepare(DataLoader(range(21), batch_size=3, drop_last=True), n=2).remainder == 0
    assert _prepare(DataLoader(range(21), batch_size=3), n=2, even_batches=False).remainder == 0
    assert _prepare(DataLoader(range(21), batch_size=3), n=1).remainder == 0


def test_nested_batches_and_options_survive() -> None:
    data = [{"x": torch.ones(2), "label": i} for i in range(4)]
    loader = _prepare(DataLoader(data, batch_size=2, pin_memory=False), non_blocking=True)
    batch = next(iter(loader))
    assert batch["x"].shape == (2, 2) and batch["label"].tolist() == [0, 1]
    assert _prepare(loader) is loader  # preparing twice returns it


def test_resume_mid_epoch_is_exact_and_independent_of_rng() -> None:
    dataset = torch.arange(17)
    loader = _prepare(DataLoader(dataset, batch_size=2, shuffle=True))
    epoch0 = [b.tolist() for b in loader]
    epoch1 = []
    state: dict[str, Any] = {}
    for i, b in enumerate(loader):
        epoch1.append(b.tolist())
        if i == 2:
            state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 3 and epoch0 != epoch1
    torch.manual_seed(99)
    resumed = _prepare(DataLoader(dataset, batch_size=2, shuffle=True))
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == epoch1[3:]
    assert resumed.state_dict()["epoch"] == 2 and resumed.epoch == 2


def test_the_shuffle_follows_the_dataloaders_generator_like_the_plain_loader() -> None:
    plain = DataLoader(range(8), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    prepared = _prepare(DataLoader(range(8), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0)))
    for _ in range(3):  # epoch after epoch, the generator moves on the same way
        assert [b.tolist() for b in prepared] == [b.tolist() for b in plain]


def test_use_seedable_sampler_makes_the_order_a_function_of_seed_and_epoch() -> None:
    loader = _prepare(DataLoader(range(9), batch_size=2, shuffle=True), use_seedable_sampler=True, data_seed=3)
    epoch0 = [b.tolist() for b in loader]
    assert [b.tolist() for b in loader] != epoch0
    loader.set_epoch(0)
    assert [b.tolist() for b in loader] == epoch0


def test_data_seed_makes_shuffles_reproducible() -> None:
    a = _prepare(DataLoader(range(10), batch_size=2, shuffle=True), data_seed=5)
    b = _prepare(DataLoader(range(10), batch_size=2, shuffle=True), data_seed=5)
    assert [x.tolist() for x in a] == [x.tolist() for x in b] and a.seed == 5


def test_load_state_errors() -> None:
    loader = _prepare(DataLoader(range(4), batch_size=2))
    with pytest.raises(DataPrepareError, match="missing"):
        loader.load_state_dict({"epoch": 0})
    with pytest.raises(DataPrepareError, match="saved mid-epoch with 2 processes"):
        loader.load_state_dict({"epoch": 0, "batches_yielded": 1, "seed": 0, "num_processes": 2})
    loader.load_state_dict({"epoch": 3, "batches_yielded": 0, "seed": 0, "num_processes": 2})  # a boundary: fine
    assert loader.epoch == 3


def test_unbatched_loaders_are_dealt_key_by_key() -> None:
    assert list(_prepare(DataLoader(range(5), batch_size=None), rank=1, n=2)) == [1, 3, 0]
    as_sampler = BatchSampler(SequentialSampler(range(13)), 3, drop_last=False)
    dealt = _prepare(DataLoader(torch.arange(13), sampler=as_sampler, batch_size=None), rank=1, n=2)
    assert [b.tolist() for b in dealt] == [[3, 4, 5], [9, 10, 11], [0, 1, 2]] and len(dealt) == 3
    assert dealt.remainder == 1  # last round: rank 0's [12] is real, rank 1's batch is padding

    class Stream(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(range(6))

    items = _prepare(DataLoader(Stream(), batch_size=None), rank=1, n=4)
    assert list(items) == [1, 5] and not items.batched and items.remainder == 2
    with pytest.raises(DataPrepareError, match="batch_size=None"):
        _prepare(DataLoader(Stream(), batch_size=None), n=2, split_batches=True)
    with pytest.raises(DataPrepareError, match="batch_size=None"):
        _prepare(DataLoader(range(4), batch_size=None), n=2, split_batches=True)
    with pytest.raises(DataPrepareError, match="does not divide by 2"):
        _prepare(DataLoader(Stream(), batch_size=3), n=2, split_batches=True)
    loader = _prepare(DataLoader(Stream(), batch_size=2), rank=1, n=2)
    assert loader.remainder == -1  # no length: unknown until the stream ends
    assert [b.tolist() for b in loader] == [[2, 3], [0, 1]] and loader.remainder == 2
    assert [b.tolist() for b in skip_first_batches(loader, 1)] == [[0, 1]]


def test_skip_first_batches() -> None:
    loader = _prepare(DataLoader(range(10), batch_size=2))
    skipped = skip_first_batches(loader, 3)
    assert isinstance(skipped, PreparedDataLoader) and len(skipped) == 2
    assert [b.tolist() for b in skipped] == [[6, 7], [8, 9]]
    plain = skip_first_batches(DataLoader(range(6), batch_size=2), 1)
    assert [b.tolist() for b in plain] == [[2, 3], [4, 5]] and len(plain) == 2
    with pytest.raises(DataPrepareError, match="integer >= 0"):
        skip_first_batches(loader, -1)
    with pytest.raises(DataPrepareError, match="batch_size or a batch_sampler"):
        skip_first_batches(DataLoader(range(3), batch_size=None), 1)


class _Writer:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def post(self, event: Any) -> None:
        self.events.append(event)


def test_progress_events_on_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "REPORT_SECONDS", 0.0)  # every batch
    writer = _Writer()
    channel.install(writer)  # type: ignore[arg-type]
    try:
        for _ in _prepare(DataLoader(range(6), batch_size=2)):
            pass
        for _ in _prepare(DataLoader(range(6), batch_size=2), rank=1, n=2):
            pass  # another rank: its own position, for the dashboard's ranks table
    finally:
        channel.uninstall()
    assert [(e.rank, e.n, e.total, e.desc, e.epoch) for e in writer.events] == [
        (0, 1, 3, "train", 1), (0, 2, 3, "train", 1), (0, 3, 3, "train", 1),
        (1, 1, 2, "train", 1), (1, 2, 2, "train", 1)]
    assert all(isinstance(e, Progress) and e.source == "loader" for e in writer.events)


def test_progress_is_reported_at_the_first_batch_then_by_time_and_at_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "REPORT_SECONDS", 3600.0)  # nothing in between: only the ends
    writer = _Writer()
    loader = _prepare(DataLoader(range(40), batch_size=2))
    channel.install(writer)  # type: ignore[arg-type]
    try:
        for _ in range(2):  # each epoch again
            assert sum(1 for _ in loader) == 20
    finally:
        channel.uninstall()
    assert [(e.n, e.total, e.epoch) for e in writer.events] == [(1, 20, 1), (20, 20, 1), (1, 20, 2), (20, 20, 2)]
    clock = iter(range(10_000))  # a fetch reads the clock twice: a batch every 0.5 "seconds"
    monkeypatch.setattr(loader_module, "_now", lambda: next(clock) / 4)
    monkeypatch.setattr(loader_module, "REPORT_SECONDS", 1.0)
    writer.events.clear()
    channel.install(writer)  # type: ignore[arg-type]
    try:
        assert sum(1 for _ in _prepare(DataLoader(range(20), batch_size=2))) == 10
    finally:
        channel.uninstall()
    assert [e.n for e in writer.events] == [1, 3, 5, 7, 9, 10]  # a batch every 0.5 s: a report every 1 s


def test_a_batch_sets_no_attribute_of_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    # DataLoader checks every attribute write in Python (~0.5 µs), more than the rest of a batch's own work
    writes: list[str] = []
    original = DataLoader.__setattr__

    def counted(self: DataLoader, name: str, value: Any) -> None:
        writes.append(name)
        original(self, name, value)

    short, long = _prepare(DataLoader(range(8), batch_size=2), n=2), _prepare(DataLoader(range(80), batch_size=2), n=2)
    monkeypatch.setattr(DataLoader, "__setattr__", counted)
    per_epoch = []
    channel.install(_Writer())  # type: ignore[arg-type]  # progress and the step clock, as in a launched run
    try:
        for loader in (short, long, short):
            writes.clear()
            assert sum(1 for _ in loader) == len(loader)
            per_epoch.append(sorted(writes))
    finally:
        channel.uninstall()
    assert per_epoch[0] == per_epoch[1] == per_epoch[2] and per_epoch[0], per_epoch  # per epoch, not per batch


class _SplitStream(IterableDataset):  # type: ignore[type-arg]
    """0..9, split between DataLoader workers, with a length."""

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 10, step))

    def __len__(self) -> int:
        return 10


def test_a_stream_split_between_workers_reports_no_total_it_would_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "REPORT_SECONDS", 0.0)  # every batch
    writer = _Writer()
    loader = _prepare(DataLoader(_SplitStream(), batch_size=4, num_workers=2))
    channel.install(writer)  # type: ignore[arg-type]
    try:
        batches = list(loader)
    finally:
        channel.uninstall()
    assert len(batches) == 4 > len(loader) == 3  # each worker's 5 items: a batch of 4 and one of 1
    assert [(e.n, e.total) for e in writer.events] == [(1, None), (2, None), (3, None), (4, None)]


def test_a_tqdm_bar_around_the_epochs_reports_the_epoch_count() -> None:
    import io

    tqdm = pytest.importorskip("tqdm").tqdm
    writer = _Writer()
    loader = _prepare(DataLoader(range(6), batch_size=2))
    channel.install(writer)  # type: ignore[arg-type]
    try:
        for _ in tqdm(range(4), desc="epochs", file=io.StringIO()):
            for _ in tqdm(loader, file=io.StringIO()):  # a bar over the batches is not the epoch loop
                pass
            for _ in tqdm(range(3), file=io.StringIO()):  # nor one counting as many items as there are batches
                break
    finally:
        channel.uninstall()
    loops = [(e.n, e.total, e.desc) for e in writer.events if e.source == "loop"]
    assert loops == [(0, 4, "epochs"), (1, 4, "epochs"), (2, 4, "epochs"), (3, 4, "epochs")]
    first_batch = next(i for i, e in enumerate(writer.events) if e.source == "loader")
    assert writer.events[first_batch - 1].source == "loop"  # before the epoch's first batch


def test_progress_names_the_loader_by_the_models_mode_order_or_explicit_name() -> None:
    from notebook_accel import Accelerator

    writer = _Writer()
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    train, valid = accelerator.prepare(DataLoader(range(4), batch_size=2), DataLoader(range(2), batch_size=2))
    channel.install(writer)  # type: ignore[arg-type]
    try:
        model.train()
        list(train)
        list(train)
        model.eval()
        list(valid)
        model.train()
        list(valid)  # the model's mode wins over the order of preparation
        with torch.no_grad():  # an evaluation that leaves the model in train(): not the training loop (tutorial 09)
            list(valid)
        valid.name = "holdout"
        with torch.no_grad():
            list(valid)  # the explicit name wins over everything
    finally:
        channel.uninstall()
    seen = [(e.desc, e.epoch) for e in writer.events if e.n == e.total]
    assert seen == [("train", 1), ("train", 2), ("eval", 1), ("train", 2), ("eval", 3), ("holdout", 4)]
    bare = _prepare(DataLoader(range(2), batch_size=2))  # no Accelerator, no model: the first loader is "train"
    assert bare.progress_name() == "train"
    bare.loader_index = 1
    assert bare.progress_name() == "eval"


def test_breaking_out_leaves_no_active_loader() -> None:
    gs = GradientState()
    loader = _prepare(DataLoader(range(6), batch_size=2), gs=gs)
    for _ in loader:
        assert gs.in_dataloader
        break
    assert not gs.in_dataloader


def test_accelerate_resume_pattern_skips_once_and_moves_on() -> None:
    dataset = torch.arange(12)
    loader = _prepare(DataLoader(dataset, batch_size=2, shuffle=True), data_seed=1)
    epochs = [[b.tolist() for b in loader] for _ in range(3)]
    source = _prepare(DataLoader(dataset, batch_size=2, shuffle=True), data_seed=1)
    for _ in source:
        pass
    for i, _ in enumerate(source):
        if i == 1:
            state = source.state_dict()  # epoch 1, two batches done
            break
    resumed = _prepare(DataLoader(dataset, batch_size=2, shuffle=True), data_seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the epoch it is already in: the resume stays armed
    skipped = skip_first_batches(resumed, 2)  # accelerate's manual pattern on top of our automatic resume
    assert [b.tolist() for b in skipped] == epochs[1][2:]
    assert [b.tolist() for b in resumed] == epochs[2]  # the original loader moved on, nothing skipped
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # another epoch: the pending resume is cancelled, a whole epoch runs
    assert sorted(i for b in resumed for i in b.tolist()) == list(range(12))


def test_a_mid_epoch_state_without_generator_states_is_refused_for_a_shuffled_loader() -> None:
    loader = _prepare(DataLoader(torch.arange(12), batch_size=2, shuffle=True), data_seed=1)
    with pytest.raises(DataPrepareError, match="generator states"):
        loader.load_state_dict({"epoch": 1, "batches_yielded": 2, "seed": 1, "num_processes": 1})
    loader.load_state_dict({"epoch": 1, "batches_yielded": 0, "seed": 1, "num_processes": 1})  # a boundary: fine
    assert sorted(i for b in loader for i in b.tolist()) == list(range(12))


def _global_draws_of(epochs: Any) -> list[float]:
    """What the global torch RNG gives after each epoch of ``epochs`` (an iterable of iterables)."""
    after = []
    for epoch in epochs:
        for _ in epoch:
            pass
        after.append(torch.rand(()).item())
    return after


def test_an_epoch_draws_from_the_global_rng_as_a_plain_loader_does_and_a_resumed_epoch_does_not() -> None:
    """torch's DataLoader (and so accelerate's prepared one) draws its workers' base seed from the global RNG at every
    iter(); a prepared loader makes the same one draw when an epoch starts, so dropout masks and later shuffles match
    accelerate's. A run resumed inside an epoch makes no draw: its restored RNG state already holds that epoch's."""
    dataset = torch.arange(12)
    torch.manual_seed(5)
    plain = DataLoader(dataset, batch_size=4)
    expected = _global_draws_of([plain, plain])
    torch.manual_seed(5)
    prepared = _prepare(DataLoader(dataset, batch_size=4))
    assert _global_draws_of([prepared, prepared]) == expected
    state: dict[str, Any] = {}
    torch.manual_seed(6)
    straight = _prepare(DataLoader(dataset, batch_size=4))
    for i, _ in enumerate(straight):
        if i == 0:
            state, rng = straight.state_dict(), torch.get_rng_state()
    after_straight = torch.rand(()).item()
    resumed = _prepare(DataLoader(dataset, batch_size=4))
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert len(list(resumed)) == 2 and torch.rand(()).item() == after_straight


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_epoch_draws_from_the_global_rng_as_accelerates_prepared_loader_does(shuffle: bool) -> None:
    """Every epoch of an unshuffled loader, and the first epoch of a shuffled one (accelerate's later shuffled epochs
    draw differently again: not matched)."""
    accelerate_data_loader = pytest.importorskip("accelerate.data_loader", reason="accelerate is in the test extra")
    dataset = torch.arange(12)
    torch.manual_seed(5)
    theirs = accelerate_data_loader.prepare_data_loader(DataLoader(dataset, batch_size=4, shuffle=shuffle),
                                                        num_processes=1, process_index=0)
    epochs = 3 if not shuffle else 1
    expected = _global_draws_of([theirs] * epochs)
    torch.manual_seed(5)
    ours = _prepare(DataLoader(dataset, batch_size=4, shuffle=shuffle))
    assert _global_draws_of([ours] * epochs) == expected
