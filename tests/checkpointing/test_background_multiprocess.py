"""Background saves with two real processes (gloo) under the plain engine (DDP) and FSDP: the bytes of a blocking
save, the run's end waiting for the write, a full disk raised at the next call, a worker killed mid-write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from notebook_accel.launcher import WorkerError, notebook_launcher
from tests.checkpointing import background_workers as workers

ENGINES = ["plain", "fsdp"]


def _launch(fn, *args):
    return notebook_launcher(fn, args, num_processes=2, dashboard=False, use_cpu=True)


def _complete(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / "checkpoints") if not n.startswith(".tmp-"))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_background_save_writes_the_bytes_of_a_blocking_one(tmp_path: Path, engine: str) -> None:
    assert _launch(workers.same_as_blocking, str(tmp_path), engine) is True


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_run_ends_only_once_the_background_save_is_committed(tmp_path: Path, engine: str) -> None:
    path = _launch(workers.returns_while_writing, str(tmp_path), engine)
    assert os.path.isfile(os.path.join(path, "manifest.json"))
    assert _complete(tmp_path) == ["checkpoint_0"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_full_disk_in_the_background_is_raised_at_the_next_call(tmp_path: Path, engine: str) -> None:
    message = _launch(workers.disk_full_in_background, str(tmp_path), engine)
    assert "background save of checkpoint" in message and "checkpoint_1" in message, message
    assert "rank 1:" in message and "No space left on device" in message, message
    assert _complete(tmp_path) == ["checkpoint_0"]
    assert _launch(workers.load_newest, str(tmp_path), engine).endswith("checkpoint_0")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("victim", [0, 1])
def test_a_worker_killed_during_the_background_write_leaves_the_previous(tmp_path: Path, engine: str,
                                                                         victim: int) -> None:
    with pytest.raises(WorkerError, match="SIGKILL"):
        _launch(workers.killed_during_background_write, str(tmp_path), engine, victim)
    assert _complete(tmp_path) == ["checkpoint_0"]
    assert _launch(workers.load_newest, str(tmp_path), engine).endswith("checkpoint_0")
