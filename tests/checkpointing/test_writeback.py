"""The early writeback of checkpoint files: every 8 MiB written is handed to the disk at once, in order, with
nothing left in Python's buffer; the bytes are unchanged; a file system that refuses it costs nothing more."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from notebook_accel.checkpointing import atomic, writeback
from notebook_accel.checkpointing.atomic import file_digest, write_torch
from notebook_accel.checkpointing.checksum import recording
from notebook_accel.checkpointing.writeback import KICK_BYTES, WritebackStream


class Recorder:
    """A stand-in for ``sync_file_range`` that notes each range and how much of the file the kernel held then."""

    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.result = result

    def __call__(self, fd: int, offset: int, count: int, flags: int) -> int:
        assert flags == 2  # SYNC_FILE_RANGE_WRITE: start the writeback, do not wait for it
        self.calls.append((offset, count, os.fstat(fd).st_size))
        return self.result


def _write(path: Path, chunks: list[bytes], start: Recorder) -> bytes:
    with open(path, "wb") as f:
        stream = WritebackStream(f, start)
        for chunk in chunks:
            assert stream.write(chunk) == len(chunk)
        stream.flush()
    return b"".join(chunks)


def test_every_kick_of_written_bytes_starts_its_writeback_in_order(tmp_path: Path) -> None:
    start = Recorder()
    chunks = [os.urandom(100), os.urandom(5 << 20), os.urandom(7), os.urandom(6 << 20), os.urandom(20 << 20)]
    data = _write(tmp_path / "f", chunks, start)
    assert (tmp_path / "f").read_bytes() == data
    assert len(start.calls) == 3  # after the 6 MiB chunk (11 MiB written), then in the 20 MiB one at 19 and 27 MiB
    covered = 0
    for offset, count, on_disk in start.calls:
        assert offset == covered and KICK_BYTES <= count < 2 * KICK_BYTES  # contiguous, from the start, a kick each
        assert on_disk >= offset + count  # the range was flushed out of Python's buffer before it was asked for
        covered += count
    assert len(data) - KICK_BYTES < covered <= len(data)  # all but a tail shorter than a kick (the fsync's part)


def test_a_refusing_file_system_is_asked_once_and_the_bytes_are_the_same(tmp_path: Path) -> None:
    start = Recorder(result=-1)
    data = _write(tmp_path / "f", [os.urandom(3 * KICK_BYTES)], start)
    assert len(start.calls) == 1
    assert (tmp_path / "f").read_bytes() == data


def test_small_files_ask_for_nothing(tmp_path: Path) -> None:
    start = Recorder()
    _write(tmp_path / "f", [b"x" * 1000] * 10, start)
    assert start.calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_checkpoint_writes_go_through_it_with_the_real_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = writeback._sync_file_range()
    assert real is not None
    seen = Recorder()

    def forward(fd: int, offset: int, count: int, flags: int) -> int:
        seen(fd, offset, count, flags)
        return real(fd, offset, count, flags)

    made = WritebackStream.__init__

    def init(self: WritebackStream, file: object, start: object = None) -> None:
        made(self, file, forward)  # type: ignore[arg-type]

    monkeypatch.setattr(WritebackStream, "__init__", init)
    state = {"w": torch.randn(6 << 20)}  # 24 MiB of tensor data: three kicks
    path = str(tmp_path / "model.bin")
    with recording() as ledger:
        write_torch(path, state)
    assert len(seen.calls) == 3 and seen.calls[0][0] == 0  # the kernel took each range (a refusal stops them)
    assert ledger[os.path.abspath(path)] == file_digest(path)  # the digest is still that of every byte
    assert torch.equal(atomic.read_torch(path)["w"], state["w"])
