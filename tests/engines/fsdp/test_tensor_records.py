"""A DCP tensor record read straight into a fresh tensor: the same tensor ``torch.load`` gives, or the record's
bytes for ``torch.load`` whenever it is anything but the archive ``torch.save`` writes for one tensor."""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import pytest
import torch

from notebook_accel.checkpointing import CheckpointError
from notebook_accel.checkpointing.verified_reads import RangeReader
from notebook_accel.engines.fsdp.tensor_records import parse_record, read_tensor
from notebook_accel.engines.fsdp.torch_archives import HEAD_BYTES
from tests.engines.fsdp.records import PAD, read_in_file, record_of

def _record(value: object, **save: object) -> bytes:
    return record_of(value, **save)


def _read(tmp_path: Path, record: bytes, check: bool = False) -> torch.Tensor | bytes:
    return read_in_file(tmp_path, record, read_tensor, check)


def _loaded(record: bytes) -> torch.Tensor:
    loaded = torch.load(io.BytesIO(record), map_location="cpu", weights_only=True)
    assert isinstance(loaded, torch.Tensor)
    return loaded


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Same dtype, layout and bytes (NaNs included)."""
    assert (got.dtype, got.shape, got.stride(), got.storage_offset()) == \
        (want.dtype, want.shape, want.stride(), want.storage_offset())
    assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()
    as_bytes = [torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()) for t in (got, want)]
    assert torch.equal(*as_bytes)


def _tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    big = torch.randn(700, 1000)  # 2.8 MB: larger than the head, the tail and the helper's threshold
    return {
        "float32": torch.randn(3, 4), "float64": torch.randn(5).double(), "float16": torch.randn(2, 3).half(),
        "bfloat16": torch.randn(4, 6).bfloat16(), "int64": torch.arange(7), "int32": torch.arange(5).int(),
        "int16": torch.arange(3).short(), "int8": torch.arange(-3, 3).to(torch.int8),
        "uint8": torch.arange(9).to(torch.uint8), "bool": torch.tensor([True, False, True]),
        "complex64": torch.randn(3, dtype=torch.complex64), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 5),
        "nan": torch.tensor([float("nan"), float("inf"), -0.0]), "big": big, "4-d": torch.randn(2, 3, 4, 5),
        "view-with-offset": torch.arange(10.0)[3:8],  # torch.save writes the whole storage
        "transposed": torch.randn(6, 4).t(), "expanded": torch.randn(3, 1).expand(3, 4),
        "many-dims": torch.randn([1] * 9 + [3]),
    }


@pytest.mark.parametrize("name", list(_tensors()))
@pytest.mark.parametrize("check", [False, True], ids=["unchecked", "checked"])
def test_a_record_reads_as_the_tensor_torch_load_gives(tmp_path: Path, name: str, check: bool) -> None:
    record = _record(_tensors()[name])
    got = _read(tmp_path, record, check=check)  # with check, finish() raises unless every byte was hashed once
    assert isinstance(got, torch.Tensor), "read the slow way"
    _same(got, _loaded(record))


def test_a_record_fills_memory_of_its_own(tmp_path: Path) -> None:
    got = _read(tmp_path, _record(torch.randn(64, 64)))
    assert isinstance(got, torch.Tensor) and got.is_contiguous() and got.storage_offset() == 0
    assert got.untyped_storage().nbytes() == got.nbytes  # no header bytes kept alive, adoptable whole
    got.add_(1)  # writable


@pytest.mark.parametrize("case", ["parameter", "requires-grad", "float8", "a-dict", "a-list", "legacy-format",
                                  "protocol-4", "two-tensors", "big-endian"])
def test_anything_else_comes_back_as_bytes_for_torch_load(tmp_path: Path, case: str) -> None:
    """Records of another form are not errors: their bytes go to ``torch.load``, which reads them as DCP does."""
    value: object = torch.randn(3)
    save: dict[str, object] = {}
    if case == "parameter":
        value = torch.nn.Parameter(torch.randn(3))
    elif case == "requires-grad":
        value = torch.randn(3, requires_grad=True)
    elif case == "float8":
        if not hasattr(torch, "float8_e4m3fn"):
            pytest.skip("this torch has no float8")
        value = torch.randn(4).to(torch.float8_e4m3fn)
    elif case == "a-dict":
        value = {"w": torch.randn(2)}
    elif case == "a-list":
        value = [torch.randn(2)]
    elif case == "legacy-format":
        save = {"_use_new_zipfile_serialization": False}
    elif case == "protocol-4":
        save = {"pickle_protocol": 4}
    elif case == "two-tensors":
        shared = torch.randn(4)
        value = (shared[:2], shared[2:])
    record = _record(value, **save)
    if case == "big-endian":
        record = record.replace(b"little", b"big\x00\x00\x00")
        assert parse_record(record, record, len(record)) is None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _read(tmp_path, record) == record


def _flip(record: bytes, at: int, mask: int) -> bytes:
    changed = bytearray(record)
    changed[at] ^= mask
    return bytes(changed)


def test_a_flipped_byte_anywhere_gives_what_torch_load_gives_or_the_bytes(tmp_path: Path) -> None:
    """Every byte of a record outside the tensor's own bytes, flipped two ways: the fast path takes the record
    only when ``torch.load`` reads it too, and then gives the very same tensor. A flip it does not take comes
    back as bytes, and ``torch.load`` decides (as it would on DCP's own path)."""
    torch.manual_seed(1)
    record = _record(torch.randn(40, 3))
    layout = parse_record(record, record, len(record))
    assert layout is not None
    data = range(layout.data_start + 8, layout.data_start + layout.data_bytes - 8)  # a few bytes of it are flipped
    taken = refused_by_torch_too = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for at in (at for at in range(len(record)) if at not in data):
            for mask in (0x01, 0x80):
                changed = _flip(record, at, mask)
                got = _read(tmp_path, changed)
                try:
                    want: torch.Tensor | None = _loaded(changed)
                except Exception:
                    want = None
                if isinstance(got, torch.Tensor):
                    assert want is not None, f"byte {at} ^ {mask:#x}: taken, though torch.load refuses it"
                    _same(got, want)
                    taken += 1
                else:
                    assert got == changed
                    refused_by_torch_too += want is None
    assert taken > 100 and refused_by_torch_too > 100  # both kinds were met


@pytest.mark.parametrize("field", ["size", "numel", "offset", "directory-size", "data-size"])
def test_a_record_that_claims_more_than_its_bytes_is_not_taken(tmp_path: Path, field: str) -> None:
    """Hand-made lies in the numbers (each keeps the record's length): the fast path never reads or views past
    the record's own bytes; the record goes to ``torch.load``, which refuses it."""
    record = bytearray(_record(torch.arange(6.0).view(2, 3)))
    layout = parse_record(bytes(record), bytes(record), len(record))
    assert layout is not None
    pickle_start = record.index(b"\x80\x02")
    if field in ("size", "numel", "offset"):
        # BININT1 opcodes (K n) of the pickle: numel 6, offset 0, size (2, 3), stride (3, 1)
        ints = [i for i in range(pickle_start, layout.data_start) if record[i] == ord("K")]
        where = {"numel": 0, "offset": 1, "size": 3}[field]
        record[ints[where] + 1] = 200
    elif field == "directory-size":
        record[-10] += 1  # the end record's directory size
    else:  # the storage's entry in the central directory says 4 bytes more (both of its sizes)
        entry = record.index(b"archive/data/0", record.index(b"PK\x01\x02")) - 46
        record[entry + 20] += 4
        record[entry + 24] += 4
    got = _read(tmp_path, bytes(record))
    assert got == bytes(record)
    if field != "directory-size":  # miniz reads past that one (it finds zip64's copy of the directory)
        with pytest.raises(Exception):  # noqa: B017 (torch's own error, of several types)
            _loaded(bytes(record))


def test_a_truncated_record_is_a_truncated_shard(tmp_path: Path) -> None:
    record = _record(torch.randn(5000))
    path = tmp_path / "shard.distcp"
    path.write_bytes(PAD + record[:-300])
    with RangeReader(path, None) as reader, pytest.raises(CheckpointError, match="a truncated shard"):
        read_tensor(reader, len(PAD), len(record))


def test_a_record_changed_after_its_head_was_read_goes_to_torch_load(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The head and tail are peeked first; if the bytes then read differ (the file changed in between), the
    record read is not trusted to the parsed layout: its bytes go to ``torch.load``."""
    record = _record(torch.randn(5000))
    other = _record(torch.randn(50, 100))  # same length, another layout
    assert len(other) == len(record)
    path = tmp_path / "shard.distcp"
    path.write_bytes(record)
    peek = RangeReader.peek

    def peek_then_change(self: RangeReader, offset: int, length: int) -> bytes:
        seen = peek(self, offset, length)
        if offset > 0:  # the tail was peeked: the file changes now
            path.write_bytes(other)
        return seen

    monkeypatch.setattr(RangeReader, "peek", peek_then_change)
    with RangeReader(path, None) as reader:
        got = read_tensor(reader, 0, len(record))
    assert got == other
    _same(_loaded(got), _loaded(other))  # type: ignore[arg-type]


def test_the_head_read_is_small_and_the_storage_is_read_once(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A record is peeked at twice (head and tail, a page each), then read in three ranges: the storage's
    bytes with one ``preadv`` into the tensor, no bytes object of the storage's size."""
    record = _record(torch.randn(300, 300))
    calls: list[tuple[str, int]] = []
    pread, preadv = os.pread, os.preadv
    monkeypatch.setattr(os, "pread", lambda fd, n, at: calls.append(("pread", n)) or pread(fd, n, at))
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, at: calls.append(("preadv", sum(len(b) for b in bufs)))
                        or preadv(fd, bufs, at))
    assert isinstance(_read(tmp_path, record), torch.Tensor)
    assert ("preadv", 300 * 300 * 4) in calls
    assert all(n <= HEAD_BYTES for kind, n in calls if kind == "pread")


def test_a_view_torch_will_not_make_goes_to_torch_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If torch refuses to make the recorded view over the fresh storage, the record's bytes (all of them, as
    read) go to ``torch.load``, which says why in its own words."""
    from notebook_accel.engines.fsdp import tensor_records

    def refuse(base: torch.Tensor, layout: object) -> torch.Tensor:
        raise RuntimeError("no such view")

    monkeypatch.setattr(tensor_records, "_build", refuse)
    record = _record(torch.randn(3000))
    assert _read(tmp_path, record, check=True) == record
