"""Issue 31 part 1: XXH3-128 checksums computed while the files are written, checked on load, old SHA-256
checkpoints still loaded and verified."""

from __future__ import annotations

import hashlib
import io
import json
import os

import pytest
import torch
import xxhash

from notebook_accel.checkpointing import CheckpointError, load_state, save_state
from notebook_accel.checkpointing import manifest as manifest_module
from notebook_accel.checkpointing.atomic import file_digest
from notebook_accel.checkpointing.checksum import HashingWriter, file_checksum, recording
from notebook_accel.checkpointing.load import checked_by
from notebook_accel.checkpointing.manifest import MANIFEST_NAME, Entry, Manifest, written_format
from tests.checkpointing.fakes import fingerprint, make_accelerator, train_step

FILES = ["pytorch_model.bin", "optimizer.bin", "scheduler.bin", "dl_state_dict_rank0.bin",
         "custom_checkpoint_0.pkl", "random_states_0.pkl"]


@pytest.fixture
def saved(tmp_path) -> str:
    acc = make_accelerator(seed=0)
    train_step(acc)
    return save_state(acc, tmp_path / "ckpt")


def _manifest(path: str) -> dict:
    with open(os.path.join(path, MANIFEST_NAME)) as f:
        return json.load(f)


def _refused(path: str, pattern: str) -> None:
    """load_state into a fresh accelerator raises matching ``pattern`` and changes nothing."""
    acc = make_accelerator(seed=2)
    before = fingerprint(acc)
    with pytest.raises(CheckpointError, match=pattern):
        load_state(acc, path)
    assert fingerprint(acc) == before


@pytest.mark.parametrize("numel", [1000, 1 << 20])  # hashed on the calling thread / on the helper meanwhile
def test_hashing_writer_digests_what_torch_save_writes(numel: int) -> None:
    buffer = io.BytesIO()
    with HashingWriter(buffer) as writer:
        torch.save({"w": torch.randn(numel), "v": torch.randn(numel), "n": 3}, writer)  # type: ignore[arg-type]
    data = buffer.getvalue()
    assert writer.size == len(data) and writer.hexdigest() == xxhash.xxh3_128(data).hexdigest()
    assert writer._helper is None  # the helper thread is gone after the block
    assert writer.write(memoryview(torch.ones(4).numpy())) == 16  # a buffer of floats counts its bytes


def test_file_checksum_of_an_empty_and_a_large_file(tmp_path) -> None:
    empty, large = tmp_path / "empty", tmp_path / "large"
    empty.write_bytes(b"")
    data = os.urandom((16 << 20) + 5)  # more than one block of the mapping
    large.write_bytes(data)
    assert file_checksum(str(empty)) == (0, xxhash.xxh3_128(b"").hexdigest())
    assert file_checksum(str(large)) == (len(data), xxhash.xxh3_128(data).hexdigest())
    assert file_checksum(str(large), "sha256") == (len(data), hashlib.sha256(data).hexdigest())


def test_the_manifest_records_the_digest_computed_while_writing(saved) -> None:
    manifest = _manifest(saved)
    assert manifest["format_version"] == 3 and sorted(manifest["files"]) == sorted(FILES)
    for name, record in manifest["files"].items():
        assert record == {"size": os.path.getsize(os.path.join(saved, name)),
                          "xxh3_128": file_digest(os.path.join(saved, name))[1]}, name


def test_a_save_reads_back_no_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the main process read every file again for its SHA-256: about 0.4 s per 572 MiB."""
    def no_read_back(*args: object) -> None:
        raise AssertionError(f"a file was read back to hash it: {args}")

    monkeypatch.setattr(manifest_module, "file_digest", no_read_back)
    acc = make_accelerator(seed=0)
    path = save_state(acc, tmp_path / "ckpt")
    assert sorted(_manifest(path)["files"]) == sorted(FILES)


def test_recording_collects_only_inside_its_block(tmp_path) -> None:
    from notebook_accel.checkpointing.atomic import write_bytes

    write_bytes(str(tmp_path / "before"), b"x")
    with recording() as ledger:
        write_bytes(str(tmp_path / "inside"), b"abc")
    write_bytes(str(tmp_path / "after"), b"y")
    assert ledger == {str(tmp_path / "inside"): (3, xxhash.xxh3_128(b"abc").hexdigest())}


@pytest.mark.parametrize("name", FILES)
def test_a_flipped_byte_in_any_file_is_caught_naming_the_file(saved, name: str) -> None:
    path = os.path.join(saved, name)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01  # one bit, same size
    with open(path, "wb") as f:
        f.write(data)
    _refused(saved, f"{name}: its XXH3-128 checksum differs from the manifest's .*load an older checkpoint")


@pytest.mark.parametrize("name", FILES)
def test_a_truncated_file_is_caught_naming_the_file(saved, name: str) -> None:
    path = os.path.join(saved, name)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 1)
    _refused(saved, f"{name}: {size - 1} bytes, the manifest says {size}")


def _as_old_format(path: str) -> None:
    """Rewrite the manifest of checkpoint ``path`` as notebook-accel wrote it before XXH3 (format 1, SHA-256)."""
    manifest = _manifest(path)
    manifest["format_version"] = 1
    for name in manifest["files"]:
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    with open(os.path.join(path, MANIFEST_NAME), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


def test_an_old_sha256_checkpoint_still_loads(tmp_path) -> None:
    source = make_accelerator(seed=0)
    train_step(source)
    path = save_state(source, tmp_path / "ckpt")
    _as_old_format(path)
    target = make_accelerator(seed=2)
    load_state(target, path)
    assert fingerprint(target) == fingerprint(source)


def test_an_old_sha256_checkpoint_is_still_verified(saved) -> None:
    _as_old_format(saved)
    path = os.path.join(saved, "optimizer.bin")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)
    _refused(saved, "optimizer.bin: its SHA-256 checksum differs from the manifest's")


def test_a_file_record_needs_exactly_one_known_checksum() -> None:
    base = Manifest(world_size=1, entries=[Entry("model", 0, "m.bin", "Net")])
    for record in ({"size": 1}, {"size": 1, "md5": "ab"}, {"size": 1, "sha256": "ab", "xxh3_128": "cd"}):
        text = json.loads(base.to_json()) | {"files": {"m.bin": record}}
        with pytest.raises(CheckpointError, match=r"one checksum of \('xxh3_128', 'sha256'\)"):
            Manifest.from_json(json.dumps(text), "m")


def _two_rank_manifest() -> Manifest:
    entries = [Entry("model", 0, "pytorch_model.bin", "Net"), Entry("optimizer", 0, "optimizer.bin", "AdamW"),
               Entry("model", 1, "shard_{rank}.distcp", "FSDP", per_rank=True, shared_files=("shard.metadata",)),
               Entry("rng", 0, "random_states_{rank}.pkl", "RNG", per_rank=True)]
    manifest = Manifest(world_size=2, entries=entries)
    sizes = {"pytorch_model.bin": 100, "optimizer.bin": 200, "shard_0.distcp": 50, "shard_1.distcp": 50,
             "shard.metadata": 1, "random_states_0.pkl": 1, "random_states_1.pkl": 1}
    manifest.files = {name: {"size": size, "xxh3_128": "0"} for name, size in sizes.items()}
    return manifest


def test_the_ranks_share_the_checksums_every_file_once() -> None:
    manifest = _two_rank_manifest()
    mine = [checked_by(manifest, [], rank, 2) for rank in (0, 1)]
    assert sorted(mine[0] + mine[1]) == sorted(manifest.all_files())  # every file, once
    assert {"shard_0.distcp", "random_states_0.pkl"} <= set(mine[0])  # a rank's own files: it reads them
    assert {"shard_1.distcp", "random_states_1.pkl"} <= set(mine[1])
    assert ("optimizer.bin" in mine[0]) != ("pytorch_model.bin" in mine[0])  # the two large ones apart
    one = checked_by(manifest, [], 0, 1)  # resumed by one process: it checks everything
    assert sorted(one) == sorted(manifest.all_files())


def test_in_per_rank_folders_each_rank_checks_what_it_reads() -> None:
    manifest = _two_rank_manifest()
    manifest.ranks, manifest.save_id = [1], "ab"
    assert checked_by(manifest, ["pytorch_model.bin", "random_states_1.pkl", "elsewhere.bin"], 1, 2) == \
        ["pytorch_model.bin", "random_states_1.pkl"]


def test_files_entries_share_are_listed_recorded_and_checked_once(tmp_path) -> None:
    joint = dict(file="state_rank{rank}_0.distcp", per_rank=True, shared_files=("state.metadata",))
    manifest = Manifest(world_size=2, entries=[Entry("model", 0, type_name="FSDP", **joint),
                                               Entry("optimizer", 0, type_name="AdamW", **joint)])
    assert manifest.all_files() == ["state_rank0_0.distcp", "state_rank1_0.distcp", "state.metadata"]
    for name in manifest.all_files():
        (tmp_path / name).write_bytes(name.encode())
    manifest.record_files(str(tmp_path))
    mine = [checked_by(manifest, [], rank, 2) for rank in (0, 1)]
    assert sorted(mine[0] + mine[1]) == sorted(manifest.all_files())  # every file hashed by one rank, once
    manifest.ranks, manifest.save_id = [1], "ab"
    assert manifest.all_files() == ["state_rank1_0.distcp", "state.metadata"]


def test_a_manifest_is_format_4_only_where_entries_share_files() -> None:
    joint = dict(file="state_rank{rank}_0.distcp", per_rank=True, shared_files=("state.metadata",))
    assert written_format([Entry("model", 0, type_name="FSDP", **joint),
                           Entry("optimizer", 0, type_name="AdamW", **joint)]) == 4
    assert written_format(_two_rank_manifest().entries) == 3  # every reader since XXH3-128 loads it
