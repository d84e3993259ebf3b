"""Two real processes (gloo): per-rank files, agreement on failure, a worker killed in the middle of a save."""

from __future__ import annotations

import os

import pytest

from notebook_accel.launcher import WorkerError, notebook_launcher
from tests.checkpointing import workers


def _launch(fn, *args):
    return notebook_launcher(fn, args, num_processes=2, dashboard=False, use_cpu=True)


@pytest.mark.timeout(120)
def test_each_rank_saves_and_restores_its_own_rng(tmp_path) -> None:
    out = _launch(workers.save_then_load, str(tmp_path))
    assert out["path"] == str(tmp_path / "checkpoints" / "checkpoint_0")
    assert {"random_states_0.pkl", "random_states_1.pkl", "dl_state_dict_rank0.bin",
            "dl_state_dict_rank1.bin", "manifest.json"} <= set(out["files"])


@pytest.mark.timeout(120)
def test_one_rank_disk_full_fails_every_rank_and_keeps_previous(tmp_path) -> None:
    message = _launch(workers.one_rank_disk_full, str(tmp_path))
    assert "1 of 2 ranks failed" in message
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["checkpoint_0"]  # temporary directory removed
    out = _launch(workers.load_newest, str(tmp_path))
    assert out["path"] == str(root / "checkpoint_0")


@pytest.mark.timeout(120)
def test_load_refusal_reaches_every_rank_before_modifying(tmp_path) -> None:
    damaged, mismatch = _launch(workers.one_rank_mismatch, str(tmp_path))
    assert "2 of 2 ranks failed" in damaged
    assert "1 of 2 ranks failed" in mismatch


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", [0, 1])
def test_worker_killed_mid_save_leaves_previous_checkpoint(tmp_path, victim) -> None:
    with pytest.raises(WorkerError, match="SIGKILL"):
        _launch(workers.killed_mid_save, str(tmp_path), victim)
    root = tmp_path / "checkpoints"
    names = sorted(os.listdir(root))
    assert names[-1] == "checkpoint_0" and all(n.startswith(".tmp-checkpoint_1-") for n in names[:-1]), names
    if victim == 0:  # the main process died: nobody cleans up, the partial save stays behind
        assert len(names) == 2 and "optimizer.bin" not in os.listdir(root / names[0])
    out = _launch(workers.load_newest, str(tmp_path))  # automatic loading skips the partial save
    assert out == {"path": str(root / "checkpoint_0"), "step": 0, "iteration": 1}


@pytest.mark.timeout(120)
def test_failure_before_writing_removes_the_temporary_directory(tmp_path) -> None:
    message = _launch(workers.one_rank_broken_loader, str(tmp_path))
    assert "rank 1: RuntimeError: loader state unavailable" in message
    assert os.listdir(tmp_path / "checkpoints") == []


@pytest.mark.timeout(120)
def test_each_rank_saves_into_its_own_folder_and_resumes_from_it(tmp_path) -> None:
    """Issue 34 item 4: accelerate's per-rank temporary folders (node-local disks) failed at load_state with
    "has no manifest.json: it is a partial save" on rank 1."""
    out = _launch(workers.save_into_a_folder_per_rank, str(tmp_path))
    assert out["ranks"] == [0] and out["format"] == 3  # format 3: XXH3-128 checksums, either layout
    assert {"random_states_0.pkl", "dl_state_dict_rank0.bin", "manifest.json"} <= set(out["files"])
    assert not {"random_states_1.pkl", "dl_state_dict_rank1.bin"} & set(out["files"])
    assert any(name.startswith("pytorch_model") for name in out["files"])  # the weights in every folder
    own_only, mixed = out["refusals"]
    assert "holds the states of ranks [1] only" in own_only and "rank 0 loads the folder it saved into" in own_only
    assert "not the folders of one save" in mixed
