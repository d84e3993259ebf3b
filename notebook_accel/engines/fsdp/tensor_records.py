"""A DCP shard record that holds one tensor, read straight into the tensor's own memory, without unpickling.

DCP writes each tensor of a shard as a ``torch.save`` archive of its own: an uncompressed zip whose entries are a
small pickle (``data.pkl``: dtype, shape, stride, storage size), the byte order, and the storage's bytes
(``data/0``). Its reader reads the record into memory, ``torch.load`` copies the storage out of it, and the
planner copies that into the target: three passes over the data, and about 230 µs of fixed work a record
(``torch.load`` with ``weights_only=True`` runs a Python unpickler), whatever the size. A 50M-parameter model with
AdamW has ~400 records a rank; a 7B one tens of thousands.

Here a record's first and last 4 KiB are looked at first (two small reads that hash nothing): the zip's central
directory at its end, each entry's local header, the small entries' values, and the pickle as a list of opcodes
(``pickletools.genops`` decodes, it runs nothing), which must match exactly the one ``torch.save`` writes for a
single CPU tensor without a gradient. Only then is a fresh tensor of the recorded dtype and size allocated and
the storage's bytes read into it with one system call: one pass over the data, no unpickler, no copy. The bytes
then read around the storage must be the ones looked at, else the record is read again the usual way.

Anything else (another layout, a big-endian file, zip64 sizes, a dtype without a storage class, a record that
does not parse, numbers that disagree) is not an error here: :func:`read_tensor` returns the record's bytes
instead, and the caller reads them with ``torch.load(weights_only=True)`` as DCP does, which reads or refuses
them. A test flips every byte around the storage and checks that a record taken here is one ``torch.load`` reads,
as the same tensor. Neither checks the zip's CRCs; the file's checksum is what finds damaged bytes.
"""

from __future__ import annotations

import dataclasses
import math
import pickletools
import struct
import sys
from typing import Any

import torch

from notebook_accel.checkpointing.verified_reads import RangeReader

__all__ = ["RecordLayout", "parse_record", "read_tensor", "HEAD_BYTES"]

#: the bytes of a record's head and of its tail looked at first (torch.save puts the storage at byte 640)
HEAD_BYTES = 4096

_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header (30 bytes)
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # a zip central directory header (46 bytes)
_END = struct.Struct("<4sHHHHIIH")  # the end of central directory record (22 bytes)
_ZIP64_END = struct.Struct("<4sQHHIIQQQQ")  # zip64's end of central directory record (56 bytes)
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # zip64's end of central directory locator (20 bytes)

#: the legacy storage classes torch.save names in a tensor's pickle, and their dtypes
_DTYPES: dict[str, torch.dtype] = {
    "FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64, "ComplexDoubleStorage": torch.complex128,
}
#: the entries every archive holds (under its folder), and the small ones that may be there with their values
_REQUIRED = {"data.pkl", "byteorder", "data/0", "version"}
_VALUES = {"byteorder": b"little", "version": b"3\n", ".format_version": b"1", ".storage_alignment": b"64"}
_OPTIONAL = {".data/serialization_id"}
_INTS = {"BININT1", "BININT2", "BININT", "LONG1"}
_MEMO = {"BINPUT", "LONG_BINPUT", "MEMOIZE"}
_SMALL_TUPLES = {"EMPTY_TUPLE": 0, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Where a record's storage lies and the tensor it holds.

    Attributes:
        data_start: the first byte of the storage's bytes, from the record's start.
        dtype: the tensor's dtype.
        numel: the storage's size in elements (its bytes are ``numel * itemsize``).
        offset: the tensor's storage offset, in elements.
        size: the tensor's shape.
        stride: the tensor's strides.
    """

    data_start: int
    dtype: torch.dtype
    numel: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def data_bytes(self) -> int:
        """The storage's size in bytes."""
        return self.numel * self.dtype.itemsize


def _directory(tail: bytes, length: int) -> dict[str, tuple[int, int]] | None:
    """The entries of the archive of ``length`` bytes that ends with ``tail``, from its central directory:
    ``name -> (local header offset, size)``; ``None`` unless every entry is stored uncompressed, unencrypted,
    without zip64 fields, and the directory lies in ``tail`` and ends the archive."""
    end_at = len(tail) - _END.size
    if end_at < 0:
        return None
    signature, disk, _, count, total, directory_size, directory_offset, comment = _END.unpack_from(tail, end_at)
    position = directory_offset - (length - len(tail))
    directory_end = position + directory_size
    if signature != b"PK\x05\x06" or disk != 0 or comment != 0 or count != total or count == 0xFFFF \
            or position < 0 or directory_end not in (end_at, end_at - _ZIP64_END.size - _ZIP64_LOCATOR.size):
        return None
    if directory_end != end_at:  # torch.save adds zip64's end records; they must say the same
        zip64 = _ZIP64_END.unpack_from(tail, directory_end)
        locator = _ZIP64_LOCATOR.unpack_from(tail, directory_end + _ZIP64_END.size)
        if zip64 != (b"PK\x06\x06", _ZIP64_END.size - 12, zip64[2], zip64[3], 0, 0, count, count, directory_size,
                     directory_offset) \
                or locator != (b"PK\x06\x07", 0, directory_offset + directory_size, 1):
            return None
    entries: dict[str, tuple[int, int]] = {}
    for _ in range(count):
        if position + _CENTRAL.size > directory_end:
            return None
        fields = _CENTRAL.unpack_from(tail, position)
        flags, method, packed, size, header_at = fields[3], fields[4], fields[8], fields[9], fields[16]
        name_length, extra_length, comment_length = fields[10], fields[11], fields[12]
        try:
            name = tail[position + _CENTRAL.size:position + _CENTRAL.size + name_length].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if fields[0] != b"PK\x01\x02" or flags & 0x1 or method != 0 or packed != size or fields[13] != 0 \
                or 0xFFFFFFFF in (packed, header_at) or name in entries:
            return None
        entries[name] = (header_at, size)
        position += _CENTRAL.size + name_length + extra_length + comment_length
    return entries if position == directory_end else None


def _visible(head: bytes, tail: bytes, length: int, start: int, size: int) -> bytes | None:
    """The record's bytes ``[start, start + size)`` where they lie in ``head`` or ``tail``, else ``None``."""
    if 0 <= start and start + size <= len(head):
        return head[start:start + size]
    tail_start = length - len(tail)
    return tail[start - tail_start:start - tail_start + size] if tail_start <= start <= length - size else None


def _data_start(head: bytes, tail: bytes, length: int, header_at: int, name: str) -> int | None:
    """Where the data of entry ``name`` starts, from its local header at ``header_at`` (which must be seen in
    ``head`` or ``tail``, name the same entry and store it uncompressed, unencrypted), or ``None``."""
    local = _visible(head, tail, length, header_at, _LOCAL.size + len(name.encode("utf-8")))
    if local is None:
        return None
    signature, _, flags, method, *_, name_length, extra_length = _LOCAL.unpack_from(local)
    if signature != b"PK\x03\x04" or flags & 0x1 or method != 0 or local[_LOCAL.size:] != name.encode("utf-8") \
            or name_length != len(local) - _LOCAL.size:
        return None
    return header_at + _LOCAL.size + name_length + extra_length


def _entries_valid(head: bytes, tail: bytes, length: int, entries: dict[str, tuple[int, int]],
                   folder: str) -> dict[str, int] | None:
    """The data start of every entry (``key -> offset``, keys without ``folder``) when the archive holds just
    what ``torch.save`` writes for a tensor, each entry's local header agrees with the directory, and each small
    entry holds the value this torch writes; else ``None``."""
    keys = {name[len(folder):] for name in entries if name.startswith(folder)}
    if len(keys) != len(entries) or not _REQUIRED <= keys or not keys <= _REQUIRED | set(_VALUES) | _OPTIONAL:
        return None
    starts: dict[str, int] = {}
    for key in keys:
        header_at, size = entries[folder + key]
        start = _data_start(head, tail, length, header_at, folder + key)
        if start is None or start + size > length - _END.size:
            return None
        value = _visible(head, tail, length, start, size) if key != "data/0" else b""
        if value is None or value != _VALUES.get(key, value) \
                or (key == ".data/serialization_id" and not value.isascii()):  # torch.load refuses that too
            return None
        starts[key] = start
    spans = sorted((entries[folder + key][0], starts[key] + entries[folder + key][1]) for key in keys)
    if any(end > next_start for (_, end), (next_start, _) in zip(spans, spans[1:])):
        return None  # entries overlap: not an archive torch.save wrote
    return starts


def _int(op: tuple[str, Any]) -> int | None:
    """The value of an integer opcode (``None`` for another opcode or a negative value)."""
    name, arg = op
    return arg if name in _INTS and isinstance(arg, int) and arg >= 0 else None


def _int_tuple(ops: list[tuple[str, Any]], at: int) -> tuple[tuple[int, ...], int] | None:
    """A tuple of non-negative ints starting at ``ops[at]`` and the index after it, or ``None``."""
    if at >= len(ops):
        return None
    if ops[at][0] == "MARK":
        end = at + 1
        while end < len(ops) and _int(ops[end]) is not None:
            end += 1
        if end >= len(ops) or ops[end][0] != "TUPLE":
            return None
        return tuple(op[1] for op in ops[at + 1:end]), end + 1
    end = at
    while end < len(ops) and _int(ops[end]) is not None:
        end += 1
    if end >= len(ops) or _SMALL_TUPLES.get(ops[end][0]) != end - at:
        return None
    return tuple(op[1] for op in ops[at:end]), end + 1


def _tensor_of(pickle_bytes: bytes) -> tuple[torch.dtype, int, int, tuple[int, ...], tuple[int, ...]] | None:
    """``(dtype, storage numel, offset, size, stride)`` of the pickle torch.save writes for one CPU tensor with
    storage key ``"0"`` and no gradient, or ``None`` for any other pickle. Nothing is unpickled."""
    try:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(pickle_bytes) if op.name not in _MEMO]
    except Exception:  # truncated or garbled: torch.load will say what is wrong
        return None
    start = [("PROTO", 2), ("GLOBAL", "torch._utils _rebuild_tensor_v2"), ("MARK", None), ("MARK", None),
             ("BINUNICODE", "storage")]
    if len(ops) < 20 or ops[:5] != start or ops[5][0] != "GLOBAL" or ops[6:8] != [("BINUNICODE", "0"),
                                                                                   ("BINUNICODE", "cpu")]:
        return None
    module, _, storage_class = str(ops[5][1]).partition(" ")
    dtype, numel, offset = _DTYPES.get(storage_class) if module == "torch" else None, _int(ops[8]), _int(ops[11])
    if dtype is None or numel is None or offset is None or ops[9:11] != [("TUPLE", None), ("BINPERSID", None)]:
        return None
    size = _int_tuple(ops, 12)
    stride = _int_tuple(ops, size[1]) if size is not None else None
    if size is None or stride is None or len(size[0]) != len(stride[0]):
        return None
    end = [("NEWFALSE", None), ("GLOBAL", "collections OrderedDict"), ("EMPTY_TUPLE", None), ("REDUCE", None),
           ("TUPLE", None), ("REDUCE", None), ("STOP", None)]
    if ops[stride[1]:] != end:
        return None
    return dtype, numel, offset, size[0], stride[0]


def _fits(numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a tensor of ``size`` and ``stride`` from ``offset`` stays inside a storage of ``numel``."""
    if any(length == 0 for length in size):
        return offset <= numel
    return offset + sum((length - 1) * step for length, step in zip(size, stride, strict=True)) < numel


def parse_record(head: bytes, tail: bytes, length: int) -> RecordLayout | None:
    """The layout of the one-tensor ``torch.save`` archive of ``length`` bytes that starts with ``head`` and ends
    with ``tail`` (each at least :data:`HEAD_BYTES` long, or the whole record), or ``None`` when it is anything
    else.

    Example:
        >>> import io
        >>> buffer = io.BytesIO(); torch.save(torch.arange(6.0).view(2, 3), buffer)
        >>> record = buffer.getvalue()
        >>> layout = parse_record(record, record, len(record))
        >>> layout.dtype, layout.size, layout.stride
        (torch.float32, (2, 3), (3, 1))
    """
    entries = _directory(tail, length) if sys.byteorder == "little" else None
    first = next(iter(entries), "") if entries else ""
    folder = first[:-len("data.pkl")]
    starts = _entries_valid(head, tail, length, entries, folder) \
        if entries and first.endswith("/data.pkl") else None
    if starts is None or entries is None:
        return None
    pickle_at, pickle_size = starts["data.pkl"], entries[first][1]
    data_at, data_size = starts["data/0"], entries[folder + "data/0"][1]
    if pickle_at + pickle_size > len(head):
        return None
    tensor = _tensor_of(head[pickle_at:pickle_at + pickle_size])
    if tensor is None:
        return None
    dtype, numel, offset, size, stride = tensor
    if data_size != numel * dtype.itemsize or not _fits(numel, offset, size, stride):
        return None
    return RecordLayout(data_at, dtype, numel, offset, size, stride)


def _contiguous(size: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``size``."""
    strides, step = [], 1
    for length in reversed(size):
        strides.append(step)
        step *= max(length, 1)
    return tuple(reversed(strides))


def _build(base: torch.Tensor, layout: RecordLayout) -> torch.Tensor:
    """The tensor of ``layout`` over the storage ``base`` (1-D, ``numel`` elements): a plain view when it covers
    the storage contiguously, else a strided one."""
    if layout.offset == 0 and math.prod(layout.size) == layout.numel and layout.stride == _contiguous(layout.size):
        return base.view(layout.size)
    return base.as_strided(layout.size, layout.stride, layout.offset)


def read_tensor(reader: RangeReader, offset: int, length: int) -> torch.Tensor | bytes:
    """The tensor that the record of ``length`` bytes at ``offset`` holds, its storage read straight into a fresh
    tensor, every byte through ``reader`` (hashed in file order when it checks); or, for a record in any other
    form, the record's bytes, for ``torch.load``.

    Raises:
        CheckpointError: the file ends inside the record (from ``reader``).
    """
    if length <= 2 * HEAD_BYTES:
        head = tail = reader.peek(offset, length)
    else:
        head, tail = reader.peek(offset, HEAD_BYTES), reader.peek(offset + length - HEAD_BYTES, HEAD_BYTES)
    complete = len(head) == len(tail) == (length if length <= 2 * HEAD_BYTES else HEAD_BYTES)
    layout = parse_record(head, tail, length) if complete else None
    if layout is None:
        return reader.read(offset, length)  # truncated records fail here, with the reader's message
    start, end = layout.data_start, layout.data_start + layout.data_bytes
    before = reader.read(offset, start)
    base = torch.empty(layout.numel, dtype=layout.dtype)
    raw: Any = base.view(torch.uint8).numpy()  # the tensor's own bytes, writable
    reader.read_into(offset + start, memoryview(raw))
    after = reader.read(offset + end, length - end)
    overlap = min(len(after), len(tail))  # the central directory, at least
    if before != head[:start] or after[len(after) - overlap:] != tail[len(tail) - overlap:]:  # changed since peeked
        return before + bytes(raw) + after  # torch.load reads or refuses it
    return _build(base, layout)
