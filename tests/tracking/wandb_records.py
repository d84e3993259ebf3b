"""Read an offline wandb run back from its ``run-<id>.wandb`` file, with wandb's own record definitions.

wandb 0.31 ships no Python reader for offline runs, so this parses the file format: a 7-byte header (``:W&B``,
a 2-byte magic, a version byte), then LevelDB-log framing (32 KiB blocks; each chunk has a CRC, a 2-byte length
and a type: full, first, middle or last) around serialised ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    """The record payloads in a .wandb file, chunks joined."""
    assert data[:4] == b":W&B", data[:8]
    out: list[bytes] = []
    pos, pending = 7, b""
    while pos + _CHUNK_HEADER <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER:  # the block's tail is padding
            pos += left_in_block
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        body = data[pos + _CHUNK_HEADER : pos + _CHUNK_HEADER + length]
        pos += _CHUNK_HEADER + length
        if kind == _FULL:
            out.append(body)
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            out.append(pending + body)
        elif kind == 0 and length == 0:  # zero padding at the end of the file
            break
    return out


def read_run(run_file: Path, history: int = 0, wait: float = 30.0) -> dict[str, Any]:
    """``{"project": ..., "config": {...}, "history": [{"_step": ..., key: value}, ...]}`` of one offline run.

    wandb's service process writes the file on its own schedule (``finish()`` can return before the last
    records are on disk on a busy machine), so the file is read again until it holds the run record and at least
    ``history`` history rows, for up to ``wait`` seconds (a hang guard; the last reading is returned).
    """
    deadline = time.monotonic() + wait
    out = _read_once(run_file)
    while (out["project"] is None or len(out["history"]) < history) and time.monotonic() < deadline:
        time.sleep(0.1)
        out = _read_once(run_file)
    return out


def _read_once(run_file: Path) -> dict[str, Any]:
    """One reading of the file (see :func:`read_run`)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"project": None, "config": {}, "history": []}
    for payload in _payloads(run_file.read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["project"] = record.run.project
            items = record.run.config.update
        elif kind == "config":
            items = record.config.update
        elif kind == "history":
            out["history"].append({_key(item): json.loads(item.value_json) for item in record.history.item})
            continue
        else:
            continue
        out["config"].update({item.key: json.loads(item.value_json) for item in items})
    return out


def _key(item: Any) -> str:
    """A history item's name (wandb stores it as ``key`` or as the parts of ``nested_key``)."""
    return str(item.key or "/".join(item.nested_key))
