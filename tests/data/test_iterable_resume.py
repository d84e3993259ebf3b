"""Resuming an IterableDataset: positioned directly when it has state_dict/load_state_dict (nothing read twice),
by reading past the consumed rounds otherwise; exact either way, on 1 and 2 processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from notebook_accel import Accelerator, notebook_launcher
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


class Counting(IterableDataset):  # type: ignore[type-arg]
    """0..n-1, counting every item read; with ``stateful`` it has the position protocol."""

    def __init__(self, n: int) -> None:
        self.n, self.position, self.reads = n, 0, 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        while self.position < self.n:
            self.position += 1
            self.reads += 1
            yield torch.tensor(float(self.position - 1))
        self.position = 0  # the next pass starts over


class Stateful(Counting):
    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


def _run(dataset_cls: type, folder: str, stop_after: int | None, resume: bool) -> dict[str, Any]:
    """Iterate one epoch of 12 items in batches of 2 per process; save after ``stop_after`` batches, or resume."""
    accelerator = Accelerator()
    dataset = dataset_cls(12)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=2))
    if resume:
        accelerator.load_state(folder)
    seen = []
    for batch in loader:
        seen.append(batch.tolist())
        if stop_after is not None and len(seen) == stop_after:
            accelerator.save_state(folder)
            break
    return {"seen": accelerator.gather_object([seen]), "reads": accelerator.gather_object([dataset.reads])}


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("dataset_cls", [Stateful, Counting], ids=["stateful", "plain"])
def test_resume_is_exact_and_a_stateful_dataset_reads_nothing_twice(tmp_path: Path, processes: int,
                                                                     dataset_cls: type) -> None:
    folder = str(tmp_path / "ckpt")
    straight = notebook_launcher(_run, args=(dataset_cls, folder, None, False), num_processes=processes,
                                 dashboard=RecordingSink())
    notebook_launcher(_run, args=(dataset_cls, folder, 2, False), num_processes=processes, dashboard=RecordingSink())
    resumed = notebook_launcher(_run, args=(dataset_cls, folder, None, True), num_processes=processes,
                                dashboard=RecordingSink())
    for rank in range(processes):
        assert resumed["seen"][rank] == straight["seen"][rank][2:], rank
    consumed = 2 * 2 * processes  # two batches of two items on every rank were trained on before the save
    expected_reads = 12 - consumed if dataset_cls is Stateful else 12
    assert resumed["reads"] == [expected_reads] * processes
