"""A DCP shard record that holds one tensor, read straight into the tensor's own memory, without unpickling.

DCP writes each tensor of a shard as a ``torch.save`` archive of its own: an uncompressed zip whose entries are a
small pickle (``data.pkl``: dtype, shape, stride, storage size), the byte order, and the storage's bytes
(``data/0``). Its reader reads the record into memory, ``torch.load`` copies the storage out of it, and the
planner copies that into the target: three passes over the data, and about 230 µs of fixed work a record
(``torch.load`` with ``weights_only=True`` runs a Python unpickler), whatever the size. A 50M-parameter model with
AdamW has ~400 records a rank; a 7B one tens of thousands.

Here a record's first and last 4 KiB are looked at first (two small reads that hash nothing) and taken apart as a
zip (:mod:`.torch_archives`); its pickle is read as a list of opcodes (``pickletools.genops`` decodes, it runs
nothing), which must match exactly the one ``torch.save`` writes for a single CPU tensor without a gradient. Only
then is a fresh tensor of the recorded dtype and size allocated and the storage's bytes read into it with one
system call: one pass over the data, no unpickler, no copy. The bytes then read around the storage must be the
ones looked at, else the record is read again the usual way.

Anything else (another layout, a big-endian file, zip64 sizes, a dtype without a storage class, a record that
does not parse, numbers that disagree) is not an error here: :func:`read_tensor` returns the record's bytes
instead, and the caller reads them with ``torch.load(weights_only=True)`` as DCP does, which reads or refuses
them. A test flips every byte around the storage and checks that a record taken here is one ``torch.load`` reads,
as the same tensor. Neither checks the zip's CRCs; the file's checksum is what finds damaged bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pickletools
from typing import Any

import torch

from notebook_accel.checkpointing.verified_reads import RangeReader
from notebook_accel.engines.fsdp.torch_archives import parse_archive, peek

__all__ = ["RecordLayout", "parse_record", "read_tensor"]

#: the legacy storage classes torch.save names in a tensor's pickle, and their dtypes
_DTYPES: dict[str, torch.dtype] = {
    "FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64, "ComplexDoubleStorage": torch.complex128,
}
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


@functools.lru_cache(maxsize=1024)  # a model's records mostly share a few pickles (a layer's weight and its states)
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
    with ``tail`` (as :func:`~.torch_archives.peek` gives them), or ``None`` when it is anything else.

    Example:
        >>> import io
        >>> buffer = io.BytesIO(); torch.save(torch.arange(6.0).view(2, 3), buffer)
        >>> record = buffer.getvalue()
        >>> layout = parse_record(record, record, len(record))
        >>> layout.dtype, layout.size, layout.stride
        (torch.float32, (2, 3), (3, 1))
    """
    archive = parse_archive(head, tail, length)
    tensor = _tensor_of(archive.pickle) if archive is not None and archive.storage_start is not None else None
    if archive is None or archive.storage_start is None or tensor is None:
        return None
    dtype, numel, offset, size, stride = tensor
    if archive.storage_size != numel * dtype.itemsize or not _fits(numel, offset, size, stride):
        return None
    return RecordLayout(archive.storage_start, dtype, numel, offset, size, stride)


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
    seen = peek(reader, offset, length)
    layout = parse_record(*seen, length) if seen is not None else None
    if seen is None or layout is None:
        return reader.read(offset, length)  # truncated records fail here, with the reader's message
    head, tail = seen
    start, end = layout.data_start, layout.data_start + layout.data_bytes
    before = reader.read(offset, start)
    base = torch.empty(layout.numel, dtype=layout.dtype)
    raw: Any = base.view(torch.uint8).numpy()  # the tensor's own bytes, writable
    reader.read_into(offset + start, memoryview(raw))
    after = reader.read(offset + end, length - end)
    overlap = min(len(after), len(tail))  # the central directory, at least
    if before != head[:start] or after[len(after) - overlap:] != tail[len(tail) - overlap:]:  # changed since peeked
        return before + bytes(raw) + after  # torch.load reads or refuses it
    try:
        return _build(base, layout)
    except RuntimeError:  # a view torch does not make (too many dimensions, say): torch.load says why
        return before + bytes(raw) + after
