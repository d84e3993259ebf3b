"""Shard records for the record readers' tests: ``torch.save`` archives, read from inside a file."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import xxhash

from notebook_accel.checkpointing.verified_reads import RangeReader

PAD = b"\x07" * 37  # bytes of other records before and after, at an odd offset

T = TypeVar("T")


def record_of(value: object, **save: Any) -> bytes:
    """``value`` as ``torch.save`` writes it (DCP writes each record so)."""
    buffer = io.BytesIO()
    torch.save(value, buffer, **save)
    return buffer.getvalue()


def read_in_file(tmp_path: Path, record: bytes, read: Callable[[RangeReader, int, int], T],
                 check: bool = False) -> T:
    """``read`` on ``record`` inside a shard file, between other bytes; with ``check``, the whole file's checksum
    is checked on the way (``finish`` raises unless every byte was hashed once)."""
    path = tmp_path / "shard.distcp"
    data = PAD + record + PAD
    path.write_bytes(data)
    expected = ("xxh3_128", xxhash.xxh3_128(data).hexdigest(), len(data)) if check else None
    with RangeReader(path, expected) as reader:
        got = read(reader, len(PAD), len(record))
        reader.finish()
    return got
