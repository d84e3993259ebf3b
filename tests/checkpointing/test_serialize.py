"""``save_without_crc``: ``torch.save`` with the zip's CRC-32s left out, for one archive only."""

from __future__ import annotations

import io
import threading
import zipfile
from pathlib import Path

import torch

from notebook_accel.checkpointing import serialize
from notebook_accel.checkpointing.atomic import read_torch, write_torch
from notebook_accel.checkpointing.serialize import save_without_crc


def _state() -> dict[str, object]:
    weight = torch.randn(64, 32)
    return {"w": weight, "tied": weight, "view": weight[3:5], "n": 3, "s": "x", "l": [torch.arange(4), 1.5]}


def _crcs(data: bytes) -> list[int]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [info.CRC for info in archive.infolist()]


def test_this_torch_is_driven_without_the_fallback() -> None:
    assert serialize.USABLE  # else every save would fall back to torch.save (and compute the CRCs again)


def test_the_archive_is_torch_saves_own_with_the_crcs_zeroed() -> None:
    state = _state()
    ours = io.BytesIO()
    save_without_crc(state, ours)
    torch.serialization.set_crc32_options(False)
    try:
        reference = io.BytesIO()
        torch.save(state, reference)
    finally:
        torch.serialization.set_crc32_options(True)
    assert ours.getvalue() == reference.getvalue()
    assert set(_crcs(ours.getvalue())) == {0}


def test_a_file_without_crcs_loads_whole_with_its_sharing(tmp_path: Path) -> None:
    state = _state()
    write_torch(str(tmp_path / "f.bin"), state)
    loaded = read_torch(str(tmp_path / "f.bin"))
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["view"], state["view"])
    assert loaded["tied"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
    assert loaded["l"][1] == 1.5 and loaded["s"] == "x"


def test_the_crcs_of_torch_save_in_another_thread_are_left_alone() -> None:
    """The switch is this archive's, not the process's: a torch.save running meanwhile keeps its CRCs."""
    stop = threading.Event()
    crcs: list[list[int]] = []

    def loop() -> None:
        while not stop.is_set():
            saved = io.BytesIO()
            torch.save({"t": torch.ones(1 << 16)}, saved)
            crcs.append(_crcs(saved.getvalue()))

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        for _ in range(20):
            save_without_crc({"t": torch.ones(1 << 18)}, io.BytesIO())
    finally:
        stop.set()
        thread.join()
    assert crcs and all(all(c != 0 for c in each) for each in crcs)


class _FullAfter(io.RawIOBase):
    """A stream that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        size = memoryview(data).nbytes  # type: ignore[arg-type]
        if size > self.room:
            raise OSError(28, "No space left on device")
        self.room -= size
        return size


def test_a_write_that_fails_midway_raises_its_own_error_and_the_process_lives_on() -> None:
    # torch's writer, left unfinished, finalises itself when freed; failing there would abort the process
    for room in (0, 100, 5000, 300_000):
        try:
            save_without_crc({"a": torch.zeros(50_000), "b": torch.ones(50_000)}, _FullAfter(room))
        except OSError as e:
            assert e.errno == 28
        else:
            raise AssertionError(f"a stream with room for {room} bytes took the whole archive")


def test_a_checkpoints_torch_files_leave_the_crcs_out(tmp_path: Path) -> None:
    write_torch(str(tmp_path / "c.bin"), {"w": torch.ones(8)})
    write_torch(str(tmp_path / "e.bin"), {"w": torch.ones(8)}, zip_crcs=True)
    assert set(_crcs((tmp_path / "c.bin").read_bytes())) == {0}
    assert 0 not in _crcs((tmp_path / "e.bin").read_bytes())
