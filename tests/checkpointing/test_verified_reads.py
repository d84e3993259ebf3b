"""Checksums checked while a reader reads a file by ranges: every byte hashed exactly once, skipped ones too."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import xxhash

from notebook_accel.checkpointing import CheckpointError
from notebook_accel.checkpointing import verified_reads
from notebook_accel.checkpointing.verified_reads import (
    RangeReader,
    expected_digest,
    verified_while_read,
    verifying,
)

DATA = bytes(range(256)) * 64  # 16 KiB
#: the records a reader asks for, in the order it asks: a gap before the first, between, and a tail after
RANGES = [(4000, 100), (100, 50), (9000, 3000), (4100, 900), (4000, 100)]


@pytest.fixture(autouse=True, params=["inline", "helper"])
def where_hashed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: ranges hashed on the calling thread (the small ones), and on the helper thread (what a
    large range gets: here every range and gap block of 64 bytes or more)."""
    if request.param == "helper":
        monkeypatch.setattr(verified_reads, "_OVERLAP", 64)
        monkeypatch.setattr(verified_reads, "_GAP_BLOCK", 1000)  # gaps in several blocks, each on the helper
    return str(request.param)


def _helpers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("checkpoint-verify")]


def _file(tmp_path: Path, data: bytes = DATA) -> str:
    path = tmp_path / "shard.distcp"
    path.write_bytes(data)
    return str(path)


def _expected(data: bytes = DATA, algorithm: str = "xxh3_128") -> Any:
    digest = xxhash.xxh3_128(data).hexdigest() if algorithm == "xxh3_128" else hashlib.sha256(data).hexdigest()
    return algorithm, digest, len(data)


def _read(path: str, expected: Any) -> list[bytes]:
    """Read RANGES in offset order (as the shard reader does), then finish."""
    with RangeReader(path, expected) as reader:
        out = [reader.read(offset, length) for offset, length in sorted(RANGES)]
        reader.finish()
    return out


@pytest.mark.parametrize("algorithm", ["xxh3_128", "sha256"])  # old SHA-256 checkpoints are checked the same way
def test_the_ranges_come_back_and_the_whole_file_is_checked(tmp_path: Path, algorithm: str) -> None:
    path = _file(tmp_path)
    with verifying({path: _expected(algorithm=algorithm)}) as left:
        assert _read(path, expected_digest(path)) == [DATA[o:o + n] for o, n in sorted(RANGES)]
    assert left == {}  # crossed off: checked while read


@pytest.mark.parametrize("where", [0, 50, 200, 4050, 5500, 8999, 12000, len(DATA) - 1],
                         ids=["head", "gap-before", "gap-between", "inside-a-range", "skipped-middle",
                              "just-before-a-range", "first-tail-byte", "last-byte"])
def test_a_flipped_byte_anywhere_is_found_also_where_no_range_reads(tmp_path: Path, where: int) -> None:
    damaged = bytearray(DATA)
    damaged[where] ^= 0xFF
    path = _file(tmp_path, bytes(damaged))
    with verifying({path: _expected()}) as left:
        with pytest.raises(CheckpointError, match="shard.distcp: its XXH3-128 checksum differs from the manifest"):
            _read(path, expected_digest(path))
    assert path in left  # not crossed off


def test_every_byte_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path)
    read: list[tuple[int, int]] = []
    real = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        read.append((offset, length))
        return real(fd, length, offset)

    monkeypatch.setattr(verified_reads.os, "pread", counting)
    _read(path, _expected())
    covered = sorted(read)
    assert covered[0][0] == 0 and sum(n for _, n in covered) == len(DATA)  # no byte twice (the repeat from memory)
    assert all(a + n == b for (a, n), (b, _) in zip(covered, covered[1:]))  # and none left out


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, DATA[:10000])
    with RangeReader(path, _expected()) as reader, pytest.raises(CheckpointError, match="truncated shard"):
        reader.read(9000, 3000)
    with RangeReader(path, _expected()) as reader:
        reader.read(100, 50)
        with pytest.raises(CheckpointError, match="10000 bytes, the manifest says 16384"):
            reader.finish()


def test_a_longer_file_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, DATA + b"x")
    with pytest.raises(CheckpointError, match="16385 bytes, the manifest says 16384"):
        _read(path, _expected())


def test_without_expectation_nothing_is_hashed_or_checked(tmp_path: Path) -> None:
    path = _file(tmp_path, b"\0" * len(DATA))  # would fail any check
    assert expected_digest(path) is None  # outside a verifying block
    with verifying({"/elsewhere": _expected()}):
        assert expected_digest(path) is None
        _read(path, None)
        verified_while_read(path)  # not listed: nothing happens


def _collective(tmp_path: Path, data: bytes, read: Any) -> tuple[Any, Any, dict[str, Any]]:
    """A one-object checkpoint whose collective reader is ``read``, and the file it owes ``shard.distcp``."""
    from notebook_accel.checkpointing.manifest import Entry, Manifest
    from notebook_accel.checkpointing.saved import Saved

    path = _file(tmp_path, data)
    entry = Entry("model", 0, "shard.distcp", "Net")
    manifest = Manifest(world_size=1, entries=[entry], files={"shard.distcp": {"size": len(DATA),
                                                                             "xxh3_128": _expected()[1]}})
    saved = Saved(entry, get=dict, check=lambda state: [], set=lambda state: None, read=read)
    return manifest, saved, {os.path.abspath(path): manifest.expected("shard.distcp")}


def test_an_owed_file_the_reader_never_opened_is_hashed_after_the_read(tmp_path: Path) -> None:
    from notebook_accel.checkpointing.collective import read_collective

    damaged = bytearray(DATA)
    damaged[7] ^= 1
    manifest, saved, owed = _collective(tmp_path, bytes(damaged), read=lambda directory: {"read": "nothing"})
    with pytest.raises(CheckpointError, match="is damaged: shard.distcp: its XXH3-128 checksum differs"):
        read_collective([saved], [None], manifest, str(tmp_path), 1, owed)
    manifest, saved, owed = _collective(tmp_path, DATA, read=lambda directory: {"read": "nothing"})
    assert read_collective([saved], [None], manifest, str(tmp_path), 1, owed) == [{"read": "nothing"}]


def test_a_read_that_fails_on_a_damaged_file_says_it_is_damaged(tmp_path: Path) -> None:
    from notebook_accel.checkpointing.collective import read_collective

    def garbled(directory: str) -> Any:
        raise ValueError("not a zip archive")  # what a parser makes of the damaged bytes

    damaged = bytearray(DATA)
    damaged[7] ^= 1
    manifest, saved, owed = _collective(tmp_path, bytes(damaged), read=garbled)
    with pytest.raises(CheckpointError, match="is damaged: shard.distcp: its XXH3-128 checksum differs") as caught:
        read_collective([saved], [None], manifest, str(tmp_path), 1, owed)
    assert "not a zip archive" not in str(caught.value)
    manifest, saved, owed = _collective(tmp_path, DATA, read=garbled)  # an intact file: the reader's own error
    with pytest.raises(CheckpointError, match="not a zip archive"):
        read_collective([saved], [None], manifest, str(tmp_path), 1, owed)


def test_only_readers_that_check_while_reading_defer_their_files_checksums() -> None:
    """DeepSpeed's reader (a collective ``read`` that checks nothing) must get files already checked."""
    from notebook_accel.checkpointing.load import _read_while_loading
    from notebook_accel.checkpointing.manifest import Entry
    from notebook_accel.checkpointing.saved import Saved

    shards = Entry("model", 0, "fsdp_state_0_rank{rank}_0.distcp", "Net", per_rank=True,
                   shared_files=("fsdp_state_0.metadata",))
    zero = Entry("model", 1, "zero_pp_rank_{rank}_mp_rank_00_model_states.pt", "Net", per_rank=True)

    def objects(checks: bool) -> list[Saved]:
        return [Saved(entry, dict, lambda state: [], lambda state: None, read=lambda directory: {},
                      checks_while_reading=checks and entry is shards) for entry in (shards, zero)]

    assert _read_while_loading(objects(True), 2) == {"fsdp_state_0_rank0_0.distcp", "fsdp_state_0_rank1_0.distcp"}
    assert _read_while_loading(objects(False), 2) == set()  # the metadata and DeepSpeed's files: checked first


def test_the_helper_thread_hashes_large_ranges_and_never_outlives_the_reader(tmp_path: Path, where_hashed: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path)
    threads: set[str] = set()
    real = verified_reads.RangeReader._update

    def watching(self: RangeReader, data: Any) -> None:
        real(self, data)
        threads.update(_helpers())

    monkeypatch.setattr(verified_reads.RangeReader, "_update", watching)
    _read(path, _expected())
    assert bool(threads) == (where_hashed == "helper")  # the helper ran exactly when ranges were large
    assert _helpers() == []  # and was stopped with the reader
    damaged = bytearray(DATA)
    damaged[9500] ^= 1  # inside a range hashed on the helper
    with pytest.raises(CheckpointError, match="checksum differs"):
        _read(_file(tmp_path, bytes(damaged)), _expected())
    with RangeReader(path, _expected()) as reader, pytest.raises(RuntimeError, match="a parse failed"):
        reader.read(9000, 3000)
        raise RuntimeError("a parse failed")  # the caller fails while a hash may be in flight
    assert _helpers() == []


def test_the_helper_keeps_at_most_one_range_in_flight(tmp_path: Path, where_hashed: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading ahead of the hash would hold every read range in memory: the next read waits for the last hash."""
    if where_hashed == "inline":
        pytest.skip("nothing is in flight when every range is hashed inline")
    path = _file(tmp_path)
    gate = threading.Event()
    flight: list[int] = []
    reader = RangeReader(path, _expected())
    real_update = reader._hash.update

    def slow(data: Any) -> None:
        flight.append(1)
        assert len(flight) == 1, "two hashes in flight"
        gate.wait(5)
        real_update(data)
        flight.pop()

    reader._hash = type("Slow", (), {"update": staticmethod(slow), "hexdigest": reader._hash.hexdigest})()
    with reader:
        reader.read(0, 4000)
        timer = threading.Timer(0.2, gate.set)
        timer.start()
        reader.read(4000, 4000)  # waits for the first hash (released by the timer)
        assert gate.is_set()
        reader.finish()
    timer.join()


def test_ranges_read_into_buffers_and_peeks_are_hashed_like_reads(tmp_path: Path) -> None:
    """``read_into`` fills the caller's buffer and hashes it in file order like ``read``; ``peek`` hashes
    nothing and changes nothing of what may be read next. Mixed in any order, the file is checked once."""
    path = _file(tmp_path)
    pieces = []
    with verifying({path: _expected()}) as left, RangeReader(path, expected_digest(path)) as reader:
        for n, (offset, length) in enumerate(sorted(RANGES)):
            assert reader.peek(offset, length) == DATA[offset:offset + length]
            if n % 2:
                buffer = bytearray(length)
                reader.read_into(offset, memoryview(buffer))
                pieces.append(bytes(buffer))
            else:
                pieces.append(reader.read(offset, length))
        assert reader.peek(len(DATA) - 10, 100) == DATA[-10:]  # a peek past the end is short, not an error
        reader.finish()
    assert pieces == [DATA[o:o + n] for o, n in sorted(RANGES)]
    assert left == {}


def test_a_flipped_byte_read_into_a_buffer_is_found(tmp_path: Path) -> None:
    damaged = bytearray(DATA)
    damaged[9500] ^= 0x01
    path = _file(tmp_path, bytes(damaged))
    with RangeReader(path, _expected()) as reader:
        reader.read_into(9000, memoryview(bytearray(3000)))
        with pytest.raises(CheckpointError, match="checksum differs"):
            reader.finish()


def test_a_buffer_past_the_end_of_the_file_is_a_truncated_shard(tmp_path: Path) -> None:
    path = _file(tmp_path)
    with RangeReader(path, _expected()) as reader, pytest.raises(CheckpointError, match="the file ends at byte 16384"):
        reader.read_into(16000, memoryview(bytearray(1000)))


def test_a_range_the_system_reads_in_pieces_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux reads at most 2 GiB in one call: a reader given fewer bytes than it asked for reads on, and checks
    the whole file; the short read is not taken for a truncated shard. Here every call stops at 1,000 bytes."""
    path = _file(tmp_path)
    pread, preadv = os.pread, os.preadv
    monkeypatch.setattr(os, "pread", lambda fd, n, at: pread(fd, min(n, 1000), at))
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, at: preadv(fd, [memoryview(buffers[0])[:1000]], at))
    with verifying({path: _expected()}) as left, RangeReader(path, expected_digest(path)) as reader:
        assert reader.read(100, 5000) == DATA[100:5100]
        buffer = bytearray(6000)
        reader.read_into(9000, memoryview(buffer))
        assert bytes(buffer) == DATA[9000:15000]
        reader.finish()
    assert left == {}
