"""The manifest: JSON round trip, file records and verification."""

from __future__ import annotations

import pytest

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Entry, Manifest, read_manifest, write_manifest


def _manifest() -> Manifest:
    return Manifest(
        world_size=2,
        entries=[
            Entry("model", 0, "pytorch_model.bin", "Net"),
            Entry("rng", 0, "random_states_{rank}.pkl", "RNG", per_rank=True),
        ],
        step=7,
        iteration=3,
    )


def test_files_of_per_rank_entries() -> None:
    assert _manifest().all_files() == ["pytorch_model.bin", "random_states_0.pkl", "random_states_1.pkl"]
    assert _manifest().entries_of("rng")[0].label() == "rng 0 (RNG)"


def test_round_trip(tmp_path) -> None:
    manifest = _manifest()
    for name in manifest.all_files():
        (tmp_path / name).write_bytes(name.encode())
    manifest.record_files(str(tmp_path))
    write_manifest(str(tmp_path), manifest)
    back = read_manifest(str(tmp_path))
    assert back == manifest
    assert back.verify_files(str(tmp_path), back.all_files()) == []


def test_verify_reports_every_problem(tmp_path) -> None:
    manifest = _manifest()
    for name in manifest.all_files():
        (tmp_path / name).write_bytes(b"abc")
    manifest.record_files(str(tmp_path))
    (tmp_path / "random_states_0.pkl").unlink()
    (tmp_path / "random_states_1.pkl").write_bytes(b"abcd")
    (tmp_path / "pytorch_model.bin").write_bytes(b"xyz")
    problems = manifest.verify_files(str(tmp_path), manifest.all_files() + ["extra.bin"])
    assert problems == [
        "pytorch_model.bin: its XXH3-128 checksum differs from the manifest's (the file was changed or corrupted "
        "after the save); load an older checkpoint or restore the file",
        "random_states_0.pkl: missing",
        "random_states_1.pkl: 4 bytes, the manifest says 3",
        "extra.bin: not listed in the manifest",
    ]
    assert manifest.verify_files(str(tmp_path), ["pytorch_model.bin"], checksum=False) == []


def test_corrupt_json_structure(tmp_path) -> None:
    (tmp_path / "manifest.json").write_text('{"world_size": 1}')
    with pytest.raises(CheckpointError, match="corrupt .*KeyError"):
        read_manifest(str(tmp_path))
