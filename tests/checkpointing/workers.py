"""Worker bodies for the multi-process checkpointing tests (module level, so any launcher can run them)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
from typing import Any

import torch

from notebook_accel.checkpointing import CheckpointError, load_state, save_state, serialize
from notebook_accel.state import ProcessState
from tests.checkpointing.fakes import Counter, FakeLoader, FakeState, fingerprint, make_accelerator, train_step

_REAL_SAVE = serialize.save_without_crc


def _fake(project_dir: str, seed: int = 0):
    """A fake Accelerator for this rank, with a real gloo process group behind it."""
    state = ProcessState(cpu=True)
    acc = make_accelerator(seed=seed, project_dir=project_dir)
    acc.state = FakeState(state.process_index, state.num_processes)
    return acc


def save_then_load(project_dir: str) -> dict[str, Any]:
    """Each rank trains with its own RNG stream, saves, scrambles, loads: each gets its own state back."""
    acc = _fake(project_dir)
    rank = acc.state.process_index
    torch.manual_seed(100 + rank)
    random.seed(100 + rank)
    train_step(acc)
    path = save_state(acc)
    expected = (random.random(), torch.rand(2).tolist())
    torch.manual_seed(7), random.seed(7)
    loaded = load_state(acc)
    assert loaded == path
    assert (random.random(), torch.rand(2).tolist()) == expected
    return {"path": path, "files": sorted(os.listdir(path))}


def _fail_on_rank(rank_to_fail: int) -> None:
    """Make this rank's next torch.save fail with a full disk, when it is ``rank_to_fail``."""
    real = torch.save

    def full(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    if int(os.environ["RANK"]) == rank_to_fail:
        torch.save = full  # type: ignore[assignment]  # DCP's shard files
        serialize.save_without_crc = full  # type: ignore[assignment]  # the other files
    else:
        torch.save = real  # type: ignore[assignment]
        serialize.save_without_crc = _REAL_SAVE  # type: ignore[assignment]


def one_rank_disk_full(project_dir: str) -> str:
    """Rank 1's disk fills during the second save: both ranks raise the same error; checkpoint_0 is intact."""
    acc = _fake(project_dir)
    save_state(acc)
    train_step(acc)
    _fail_on_rank(1)
    try:
        save_state(acc)
    except CheckpointError as e:
        message = str(e)
    else:
        raise AssertionError("save_state should have failed on every rank")
    assert "rank 1:" in message and "No space left on device" in message, message
    assert acc.project_configuration.iteration == 1
    return message


def one_rank_mismatch(project_dir: str) -> list[str]:
    """A damaged file (every rank refuses), then a mismatch on rank 1 only (rank 0 refuses too, no hang);
    nothing is modified on either rank."""
    acc = _fake(project_dir)
    path = save_state(acc)
    messages = []
    if acc.state.is_main_process:
        with open(os.path.join(path, "random_states_1.pkl"), "r+b") as f:
            f.truncate(5)
    torch.distributed.barrier()
    for _ in range(2):
        before = fingerprint(acc)
        try:
            load_state(acc)
        except CheckpointError as e:
            messages.append(str(e))
        else:
            raise AssertionError("load_state should have failed on every rank")
        assert fingerprint(acc) == before
        save_state(acc, path)  # a good checkpoint again ...
        if acc.state.process_index == 1:  # ... that rank 1 alone does not match
            acc._custom_objects.append(Counter())
    assert "random_states_1.pkl: 5 bytes" in messages[0], messages[0]
    assert "rank 1:" in messages[1] and "rank 0:" not in messages[1] and "custom object" in messages[1], messages[1]
    return messages


def killed_mid_save(project_dir: str, victim: int) -> None:
    """Save checkpoint_0, then rank ``victim`` is SIGKILLed halfway through writing a file of checkpoint_1."""
    acc = _fake(project_dir)
    save_state(acc)
    train_step(acc)
    if acc.state.process_index == victim:
        real = serialize.save_without_crc

        def dies_midway(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            real(obj, f, *args, **kwargs)
            file = getattr(f, "stream", f)  # under the writer that hashes what is written ...
            file = getattr(file, "file", file)  # ... and the one that starts its writeback: the open file
            file.flush()
            file.truncate(file.tell() // 2)
            os.kill(os.getpid(), signal.SIGKILL)

        serialize.save_without_crc = dies_midway  # type: ignore[assignment]
    save_state(acc)


def load_newest(project_dir: str) -> dict[str, Any]:
    """Automatic load of the newest complete checkpoint; returns its path and the restored step."""
    acc = _fake(project_dir, seed=5)
    path = load_state(acc)
    return {"path": path, "step": acc.step, "iteration": acc.project_configuration.iteration}


class _BrokenLoader(FakeLoader):
    """A loader whose state cannot be read."""

    def state_dict(self) -> dict[str, int]:
        raise RuntimeError("loader state unavailable")


def one_rank_broken_loader(project_dir: str) -> str:
    """Rank 1 fails before any file is written: every rank raises, the main process's temporary dir is removed."""
    acc = _fake(project_dir)
    if acc.state.process_index == 1:
        acc._dataloaders = [_BrokenLoader()]
    try:
        save_state(acc)
    except CheckpointError as e:
        return str(e)
    raise AssertionError("save_state should have failed on every rank")


def save_into_a_folder_per_rank(root: str) -> dict[str, Any]:
    """Each rank saves into its own folder (accelerate's per-rank temporary folders, node-local disks), then
    loads it back: each rank gets its own RNG stream and loader position, and the shared weights."""
    acc = _fake(root)
    rank = acc.state.process_index
    torch.manual_seed(100 + rank)
    random.seed(100 + rank)
    train_step(acc)
    own = os.path.join(root, f"node-local-{rank}")
    path = save_state(acc, own)
    assert path == own
    expected = fingerprint(acc), (random.random(), torch.rand(2).tolist())
    torch.manual_seed(7), random.seed(7)
    train_step(acc)  # the state moves on: the load must bring it back
    assert load_state(acc, own) == own
    assert (fingerprint(acc), (random.random(), torch.rand(2).tolist())) == expected
    with open(os.path.join(own, "manifest.json")) as f:
        manifest = json.load(f)
    refusals = []
    for wrong in (os.path.join(root, "node-local-1"), _another_save(acc, root)):
        try:
            load_state(acc, wrong)  # rank 1's folder on every rank, then another save's folder on rank 1
        except CheckpointError as e:
            refusals.append(str(e))
        else:
            raise AssertionError(f"load_state({wrong!r}) should have been refused on every rank")
    return {"files": sorted(os.listdir(own)), "ranks": manifest["ranks"], "format": manifest["format_version"],
            "refusals": refusals}


def _another_save(acc: Any, root: str) -> str:
    """Rank 0's folder of this save, rank 1's folder of a second save: what a load must never mix."""
    rank = acc.state.process_index
    second = save_state(acc, os.path.join(root, f"second-{rank}"))
    return os.path.join(root, "node-local-0") if rank == 0 else second
