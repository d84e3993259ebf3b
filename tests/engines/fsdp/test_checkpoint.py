"""save_state/load_state under FSDP: sharded DCP files inside our atomic, checksummed checkpoints; exact resume."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel import notebook_launcher
from notebook_accel.launcher import WorkerError
from notebook_accel.checkpointing.atomic import file_digest
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.engines.fsdp.dcp_safety import read_metadata
from tests.checkpointing.hostile import record
from tests.engines.fsdp import workers


def launch(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on 2 CPU processes; rank 0's result."""
    return notebook_launcher(fn, args, num_processes=2, dashboard=False, use_cpu=True)


SHARDED_FILES = ["fsdp_state_0.metadata", "fsdp_state_0_rank0_0.distcp", "fsdp_state_0_rank1_0.distcp"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_exact_resume_is_bitwise(strategy: str, tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    straight = launch(workers.resume, strategy, directory, False)
    resumed = launch(workers.resume, strategy, directory, True)
    assert set(SHARDED_FILES) <= set(straight["files"])  # flat: every file of a checkpoint has a plain name
    assert "pytorch_model.bin" not in straight["files"] and "optimizer.bin" not in straight["files"]
    assert resumed["losses"] == straight["losses"]  # same batches, same updates, bit for bit
    assert resumed["weights"] == straight["weights"]
    assert resumed["step_count"] == straight["step_count"] == 8 and resumed["random"] == straight["random"]
    assert resumed["step"] == straight["step"] > 0  # the Accelerator's step counter


APART_FILES = ["optimizer_0.metadata", "optimizer_0_rank0_0.distcp", "optimizer_0_rank1_0.distcp",
               "pytorch_model_fsdp_0.metadata", "pytorch_model_fsdp_0_rank0_0.distcp",
               "pytorch_model_fsdp_0_rank1_0.distcp"]  # the layout before format 4: two DCP calls


@pytest.mark.timeout(180)
def test_model_and_optimizer_are_one_dcp_state(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    assert sorted(name for name in os.listdir(directory) if name.endswith((".distcp", ".metadata"))) == SHARDED_FILES
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["format_version"] == 4  # entries share files: a reader of format 3 refuses it by its version
    shared = [(e["kind"], e["file"], e["shared_files"]) for e in manifest["entries"] if e["kind"] in ("model",
                                                                                                   "optimizer")]
    assert shared == [("model", "fsdp_state_0_rank{rank}_0.distcp", ["fsdp_state_0.metadata"]),
                      ("optimizer", "fsdp_state_0_rank{rank}_0.distcp", ["fsdp_state_0.metadata"])]
    with open(directory / "fsdp_state_0.metadata", "rb") as f:
        keys = {key.split(".")[0] for key in read_metadata(f).state_dict_metadata}
    assert keys == {"model", "optimizer_0"}


@pytest.mark.timeout(180)
def test_shards_are_hashed_while_dcp_writes_them(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume_reading_nothing_back, "FULL_SHARD", str(directory), False)  # no file is read back
    manifest = json.loads((directory / "manifest.json").read_text())
    for name in SHARDED_FILES:  # and the digests recorded are the files'
        assert manifest["files"][name]["xxh3_128"] == file_digest(str(directory / name))[1], name


@pytest.mark.timeout(180)
def test_a_load_opens_each_shard_file_once_per_rank(tmp_path: Path) -> None:
    """The checksum of a shard is checked while DCP's records are read from it, not in a pass of its own."""
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    opened = launch(workers.load_counting_opens, str(directory), workers.WIDTH)["opened"]
    for rank, counts in enumerate(opened):
        assert counts.get(f"fsdp_state_0_rank{rank}_0.distcp") == 1, (rank, counts)  # its own shards, read once
        assert set(counts.values()) == {1}, (rank, counts)  # any other rank's file it reads from: once too


@pytest.mark.timeout(180)
def test_a_flipped_byte_in_the_metadata_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    error = _flipped_load_error(directory / "fsdp_state_0.metadata")
    assert "fsdp_state_0.metadata: its XXH3-128 checksum differs" in error


@pytest.mark.timeout(180)
def test_a_truncated_shard_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    whole = (directory / "fsdp_state_0_rank1_0.distcp").stat().st_size
    error = _truncated_load_error(directory / "fsdp_state_0_rank1_0.distcp", whole - 100)
    assert f"fsdp_state_0_rank1_0.distcp: {whole - 100} bytes, the manifest says {whole}" in error


@pytest.mark.timeout(240)
def test_a_checkpoint_of_the_layout_before_format_4_resumes_exactly_and_is_checked(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    straight = launch(workers.resume_apart, "FULL_SHARD", str(directory), False)
    assert set(APART_FILES) <= set(straight["files"]) and not any("fsdp_state" in n for n in straight["files"])
    assert json.loads((directory / "manifest.json").read_text())["format_version"] == 3
    resumed = launch(workers.resume, "FULL_SHARD", str(directory), True)
    assert resumed["losses"] == straight["losses"] and resumed["weights"] == straight["weights"]
    assert resumed["step_count"] == 8 and resumed["random"] == straight["random"]
    assert resumed["step"] == straight["step"]
    shard = directory / "optimizer_0_rank1_0.distcp"
    error = _flipped_load_error(shard)
    assert "optimizer_0_rank1_0.distcp: its XXH3-128 checksum differs" in error


def _flipped_load_error(shard: Path) -> str:
    """Flip the bits of one byte in the middle of ``shard`` (same size), load its checkpoint, check that nothing
    changed and return the error."""
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = launch(workers.load_refused, str(shard.parent), workers.WIDTH)
    assert out["unchanged"] and out["optimizer_state"] == 0
    return str(out["error"])


def _truncated_load_error(file: Path, keep: int) -> str:
    """Cut ``file`` to its first ``keep`` bytes, load its checkpoint, check that nothing changed and return the
    error."""
    file.write_bytes(file.read_bytes()[:keep])
    out = launch(workers.load_refused, str(file.parent), workers.WIDTH)
    assert out["unchanged"] and out["optimizer_state"] == 0
    return str(out["error"])


@pytest.mark.timeout(180)
def test_a_truncated_metadata_file_is_refused_clearly(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    whole = (directory / "fsdp_state_0.metadata").stat().st_size
    error = _truncated_load_error(directory / "fsdp_state_0.metadata", whole // 2)  # the manifest's size catches it
    assert f"fsdp_state_0.metadata: {whole // 2} bytes, the manifest says {whole}" in error
    record(directory, "fsdp_state_0.metadata")  # and if the manifest was made to agree, the reader says what is wrong
    out = launch(workers.load_refused, str(directory), workers.WIDTH)
    assert "model 0 (FSDPTinyNet) with optimizer 0 (AdamW): fsdp_state_0.metadata is not sharded-checkpoint " \
           "metadata as DCP writes it (" in out["error"], out["error"]
    assert out["unchanged"] and out["optimizer_state"] == 0


@pytest.mark.timeout(180)
def test_sharded_files_are_in_the_manifest_and_checked(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert set(SHARDED_FILES) <= set(manifest["files"])
    for name in SHARDED_FILES:  # each rank hashed its own shard (the metadata: rank 0), and the record is the file's
        assert manifest["files"][name] == {"size": (directory / name).stat().st_size,
                                           "xxh3_128": file_digest(str(directory / name))[1]}, name
    shard = directory / "fsdp_state_0_rank1_0.distcp"
    error = _flipped_load_error(shard)
    assert "CheckpointError" in error
    assert "fsdp_state_0_rank1_0.distcp: its XXH3-128 checksum differs" in error


@pytest.mark.timeout(180)
def test_a_sharded_state_that_does_not_fit_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False)
    out = launch(workers.load_refused, str(directory), 24)  # wider model: every weight has another shape
    assert "CheckpointError" in out["error"] and "does not fit this model" in out["error"]
    assert "2 of 2 ranks failed" in out["error"]
    assert out["unchanged"] and out["optimizer_state"] == 0  # the fresh optimizer got no state either


@pytest.mark.timeout(180)
def test_full_state_dict_layout_resumes_exactly(tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    straight = launch(workers.resume, "FULL_SHARD", directory, False, 4, 4, "FULL_STATE_DICT")
    resumed = launch(workers.resume, "FULL_SHARD", directory, True, 4, 4, "FULL_STATE_DICT")
    assert {"pytorch_model_fsdp_0.bin", "optimizer_0.bin"} <= set(straight["files"])
    assert not any(name.endswith(".distcp") for name in straight["files"])
    assert resumed["losses"] == straight["losses"] and resumed["weights"] == straight["weights"]
    assert resumed["step_count"] == 8
    full = torch.load(tmp_path / "ckpt" / "pytorch_model_fsdp_0.bin", weights_only=True)
    plain = workers.TinyNet()
    plain.load_state_dict(full)  # full shapes, plain tensors: loadable without FSDP
    optimizer_state = torch.load(tmp_path / "ckpt" / "optimizer_0.bin", weights_only=True)
    assert optimizer_state["state"]["head.weight"]["exp_avg"].shape == (1, workers.WIDTH)
    wider = launch(workers.load_refused, directory, 24, "FULL_STATE_DICT")
    assert "the full weights do not fit this model" in wider["error"] and wider["unchanged"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("victim", [0, 1])
def test_a_rank_killed_mid_save_leaves_the_previous_checkpoint(tmp_path: Path, victim: int) -> None:
    with pytest.raises(WorkerError, match="SIGKILL"):
        launch(workers.killed_mid_save, str(tmp_path), victim)
    root = tmp_path / "checkpoints"
    names = sorted(os.listdir(root))
    assert names[-1] == "checkpoint_0" and all(n.startswith(".tmp-checkpoint_1-") for n in names[:-1]), names
    out = launch(workers.load_newest, str(tmp_path))  # the partial save is skipped
    assert out == {"path": str(root / "checkpoint_0"), "adam_step": 2}


@pytest.mark.timeout(180)
def test_rank0_killed_before_renaming_resumes_from_that_checkpoint_and_numbers_on(tmp_path: Path) -> None:
    import notebook_accel.checkpointing  # noqa: F401 - imported in the launching process, as a notebook may have

    with pytest.raises(WorkerError, match="SIGKILL"):
        launch(workers.killed_before_rename, str(tmp_path))
    root = tmp_path / "checkpoints"
    left = [n for n in os.listdir(root) if n.startswith(".tmp-checkpoint_1-")]
    assert left and all(f"-p{os.getpid()}h" not in n for n in left), left  # named after the worker, not us
    out = launch(workers.load_newest, str(tmp_path), True)
    assert os.path.basename(out["path"]).startswith(".tmp-checkpoint_1-") and out["adam_step"] == 4
    assert out["saved"] == str(root / "checkpoint_2")
    assert sorted(os.listdir(root)) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]


def test_manifest_entries_round_trip_shared_files() -> None:
    entry = Entry("model", 0, "m_rank{rank}_0.distcp", "TinyNet", per_rank=True,
                  shared_files=["m.metadata"])  # type: ignore[arg-type]  # as JSON gives it
    assert entry.shared_files == ("m.metadata",)
    assert entry.files(2) == ["m_rank0_0.distcp", "m_rank1_0.distcp", "m.metadata"]
    assert Entry("model", 0, "pytorch_model.bin", "Net").files(2) == ["pytorch_model.bin"]
    for bad in ["../outside.metadata", "sub/x.metadata", "/abs.metadata", "..", ""]:
        with pytest.raises(ValueError, match="not a plain file name"):
            Entry("model", 0, "m_rank{rank}_0.distcp", "Net", per_rank=True, shared_files=(bad,))
