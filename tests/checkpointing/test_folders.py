"""Saves into per-rank folders, in one process: which rank leads which folder, what the manifest holds, and
what is refused (the two-process save and load are in test_multiprocess.py)."""

from __future__ import annotations

import json

import pytest

from notebook_accel.checkpointing import CheckpointError, save_state
from notebook_accel.checkpointing import save as save_module
from notebook_accel.checkpointing.folders import Folders, folder_key
from notebook_accel.checkpointing.manifest import Entry, Manifest
from notebook_accel.checkpointing.objects import Saved
from notebook_accel.plugins import ConfigurationError, ProjectConfiguration
from tests.checkpointing.fakes import make_accelerator


def test_ranks_saving_into_one_folder_share_its_lowest_rank_as_leader() -> None:
    one = Folders.of([("", "/ckpt")] * 4)
    assert one.leaders == (0, 0, 0, 0) and not one.split and one.ranks_of(3) == (0, 1, 2, 3)
    per_node = Folders.of([("a", "/tmp/c"), ("a", "/tmp/c"), ("b", "/tmp/c"), ("b", "/tmp/c")])
    assert per_node.leaders == (0, 0, 2, 2) and per_node.split and per_node.ranks_of(3) == (2, 3)
    assert per_node.two_paths() == "rank 0 saves into '/tmp/c', rank 2 into '/tmp/c' on another machine"
    assert folder_key("/x", each_node=False) == ("", "/x") and folder_key("/x", each_node=True)[0]


def test_a_folders_manifest_names_its_ranks_and_lists_only_their_files() -> None:
    entries = [Entry("model", 0, "pytorch_model.bin", "Net"), Entry("rng", 0, "random_states_{rank}.pkl", "RNG",
                                                                     per_rank=True)]
    manifest = Manifest(world_size=4, entries=entries, ranks=[2, 3], save_id="ab12", format_version=2)
    assert manifest.all_files() == ["pytorch_model.bin", "random_states_2.pkl", "random_states_3.pkl"]
    assert Manifest.from_json(manifest.to_json(), "m").ranks == [2, 3]
    assert "ranks" not in json.loads(Manifest(world_size=4, entries=entries).to_json())  # format 1 stays as it was
    for ranks in ([4], [], "0", [True]):
        bad = json.loads(manifest.to_json()) | {"ranks": ranks}
        with pytest.raises(CheckpointError, match="ranks is .*expected a list of ranks below world_size"):
            Manifest.from_json(json.dumps(bad), "m")


def test_a_state_the_ranks_write_together_is_refused_in_per_rank_folders_naming_both_paths(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acc = make_accelerator(seed=0)
    sharded = Saved(Entry("model", 0, "pytorch_model_fsdp_0", "FSDP"), lambda: None, lambda state: [],
                    lambda state: None, write=lambda directory, state: None)
    keys = [("", str(tmp_path / "a")), ("", str(tmp_path / "b"))]
    monkeypatch.setattr(save_module, "agree", lambda error, world, action, payload=None: keys)
    monkeypatch.setattr(save_module, "collect", lambda accelerator: [sharded])
    with pytest.raises(CheckpointError) as info:
        save_state(acc, tmp_path / "a")
    message = str(info.value)
    assert f"rank 0 saves into '{tmp_path / 'a'}', rank 1 into '{tmp_path / 'b'}'" in message
    assert "model 0 (FSDP) is written by the ranks together" in message and "same output_dir on every rank" in message


def test_save_on_each_node_is_a_flag() -> None:
    assert ProjectConfiguration(save_on_each_node=True).save_on_each_node
    with pytest.raises(ConfigurationError, match="save_on_each_node"):
        ProjectConfiguration(save_on_each_node="yes")  # type: ignore[arg-type]
