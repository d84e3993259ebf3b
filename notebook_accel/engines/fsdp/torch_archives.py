"""The zip archive ``torch.save`` writes, taken apart from its first and last pages without reading the rest.

``torch.save`` writes an uncompressed zip: a folder (``archive/``) holding ``data.pkl`` (the pickle), a few small
entries (``byteorder``, ``version``, ``.format_version``, ``.storage_alignment``, ``.data/serialization_id``) and
one entry per storage (``data/0`` for a single tensor), then a central directory and, from torch 2.x on, zip64's
end records. :func:`parse_archive` reads the central directory from the archive's tail, checks each entry's local
header, the small entries' values (those this torch writes; ``torch.load`` refuses most other values) and that no
two entries overlap, and says where the pickle and the storage lie. Any other archive gives ``None``: the caller
then hands the bytes to ``torch.load``, which reads or refuses them. Nothing here runs code or trusts a number it
has not checked against the archive's size.
"""

from __future__ import annotations

import dataclasses
import struct
import sys

from notebook_accel.checkpointing.verified_reads import RangeReader

__all__ = ["Archive", "parse_archive", "peek", "HEAD_BYTES"]

#: the bytes of a record's head and of its tail looked at first (torch.save puts a storage at byte 640)
HEAD_BYTES = 4096

_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header (30 bytes)
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # a zip central directory header (46 bytes)
_END = struct.Struct("<4sHHHHIIH")  # the end of central directory record (22 bytes)
_ZIP64_END = struct.Struct("<4sQHHIIQQQQ")  # zip64's end of central directory record (56 bytes)
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # zip64's end of central directory locator (20 bytes)

#: the entries every archive holds (under its folder), the small ones that may be there with their values, and
#: the one storage a single tensor's archive has
_REQUIRED = {"data.pkl", "byteorder", "version"}
_VALUES = {"byteorder": b"little", "version": b"3\n", ".format_version": b"1", ".storage_alignment": b"64"}
_OPTIONAL = {".data/serialization_id"}
_STORAGE = "data/0"


@dataclasses.dataclass(frozen=True)
class Archive:
    """Where the parts of one ``torch.save`` archive lie.

    Attributes:
        pickle: the bytes of its ``data.pkl``.
        storage_start: the first byte of its one storage (``data/0``) from the archive's start; ``None`` when it
            holds no storage (a plain value).
        storage_size: that storage's size in bytes (0 without one).
    """

    pickle: bytes
    storage_start: int | None
    storage_size: int


def peek(reader: RangeReader, offset: int, length: int) -> tuple[bytes, bytes] | None:
    """The first and last :data:`HEAD_BYTES` of the record of ``length`` bytes at ``offset`` (each the whole record
    when it is small), read without hashing them; ``None`` when the file ends inside the record."""
    if length <= 2 * HEAD_BYTES:
        head = tail = reader.peek(offset, length)
    else:
        head, tail = reader.peek(offset, HEAD_BYTES), reader.peek(offset + length - HEAD_BYTES, HEAD_BYTES)
    return (head, tail) if len(head) == len(tail) == min(length, HEAD_BYTES if length > 2 * HEAD_BYTES
                                                         else length) else None


def parse_archive(head: bytes, tail: bytes, length: int) -> Archive | None:
    """The parts of the ``torch.save`` archive of ``length`` bytes that starts with ``head`` and ends with
    ``tail`` (as :func:`peek` gives them), or ``None`` for anything else, a big-endian one included.

    Example:
        >>> import io, torch
        >>> buffer = io.BytesIO(); torch.save(torch.zeros(4), buffer)
        >>> record = buffer.getvalue()
        >>> archive = parse_archive(record, record, len(record))
        >>> archive.storage_size, archive.pickle[:2]
        (16, b'\\x80\\x02')
    """
    entries = _directory(tail, length) if sys.byteorder == "little" else None
    first = next(iter(entries), "") if entries else ""
    folder = first[:-len("data.pkl")]
    starts = _entries_valid(head, tail, length, entries, folder) \
        if entries and first.endswith("/data.pkl") else None
    if starts is None or entries is None:
        return None
    pickle_at, pickle_size = starts["data.pkl"], entries[first][1]
    if pickle_at + pickle_size > len(head):
        return None
    storage = entries.get(folder + _STORAGE)
    return Archive(head[pickle_at:pickle_at + pickle_size], starts.get(_STORAGE), storage[1] if storage else 0)


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
    what ``torch.save`` writes for a tensor or a plain value, each entry's local header agrees with the directory,
    and each small entry holds the value this torch writes; else ``None``."""
    keys = {name[len(folder):] for name in entries if name.startswith(folder)}
    if len(keys) != len(entries) or not _REQUIRED <= keys \
            or not keys <= _REQUIRED | set(_VALUES) | _OPTIONAL | {_STORAGE}:
        return None
    starts: dict[str, int] = {}
    for key in keys:
        header_at, size = entries[folder + key]
        start = _data_start(head, tail, length, header_at, folder + key)
        if start is None or start + size > length - _END.size:
            return None
        value = _visible(head, tail, length, start, size) if key != _STORAGE else b""
        if value is None or value != _VALUES.get(key, value) \
                or (key == ".data/serialization_id" and not value.isascii()):  # torch.load refuses that too
            return None
        starts[key] = start
    spans = sorted((entries[folder + key][0], starts[key] + entries[folder + key][1]) for key in keys)
    if any(end > next_start for (_, end), (next_start, _) in zip(spans, spans[1:])):
        return None  # entries overlap: not an archive torch.save wrote
    return starts
