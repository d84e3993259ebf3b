"""``torch.save`` without the zip's per-record CRC-32: a checkpoint file's checksum is its manifest's XXH3-128.

``torch.save`` writes a zip archive and, by default, computes a CRC-32 of every record while it writes it: about a
quarter of a second of one core per GiB here (several times the XXH3-128 hash of the same bytes), most of it with
the GIL held, which a background writer takes from the training loop. A checkpoint does not need it: every file's
size and XXH3-128 digest over all of its bytes (the zip's headers included) is in the manifest and checked before
anything is loaded, so a damaged byte is found either way, and ``torch.load`` reads a file without CRCs as any
other (zip tools report the zeroed CRCs as mismatches).

torch's switch for it (``torch.serialization.set_crc32_options``) is global to the process: flipping it from a
writer thread would change the files the training loop's own ``torch.save`` calls write meanwhile. So
:func:`save_without_crc` opens torch's zip writer itself, with the CRC off for this archive only, and runs the body
of ``torch.save`` into it; where torch's internals differ from what it expects, it is plain ``torch.save``.
"""

from __future__ import annotations

import contextlib
import inspect
import pickle
from typing import IO, Any

import torch
import torch.serialization

__all__ = ["save_without_crc"]

_BODY = getattr(torch.serialization, "_save", None)  # the part of torch.save that fills an open zip writer
_ALIGNMENT = getattr(torch.serialization, "_get_storage_alignment", None)


def _usable() -> bool:
    """Whether this torch's internals are the ones :func:`save_without_crc` drives (else it uses ``torch.save``)."""
    if _BODY is None or _ALIGNMENT is None or not hasattr(torch._C, "PyTorchFileWriter"):
        return False
    try:
        names = list(inspect.signature(_BODY).parameters)
    except (TypeError, ValueError):
        return False
    return names == ["obj", "zip_file", "pickle_module", "pickle_protocol", "_disable_byteorder_record"]


USABLE = _usable()


def save_without_crc(obj: Any, stream: IO[bytes]) -> None:
    """``torch.save(obj, stream)``, the archive's CRC-32 fields left zero (when this torch allows it).

    Example:
        >>> import io
        >>> buffer = io.BytesIO()
        >>> save_without_crc({"w": torch.ones(2)}, buffer)
        >>> torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)["w"]
        tensor([1., 1.])
    """
    if not USABLE:
        torch.save(obj, stream)
        return
    writer = torch._C.PyTorchFileWriter(stream, False, _ALIGNMENT())  # type: ignore[misc]
    try:
        _BODY(obj, writer, pickle, torch.serialization.DEFAULT_PROTOCOL, False)  # type: ignore[misc]
    except BaseException:
        # the archive must be finalised once whatever happens: torch's writer left unfinished finalises itself
        # when it is freed, and an error there (a full disk) would abort the process; the first error is the one
        with contextlib.suppress(Exception):
            writer.write_end_of_file()
        raise
    writer.write_end_of_file()
    stream.flush()
