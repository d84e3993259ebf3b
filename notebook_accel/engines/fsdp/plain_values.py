"""A DCP shard record that holds a plain value (a learning rate, betas, a flag, a list of parameter ids), decoded
from its pickle's opcodes without an unpickler.

DCP writes each non-tensor value of a sharded state (an optimizer's ``param_groups`` entries: ``lr``, ``betas``,
``eps``, ``foreach``, ``params`` ...) as a ``torch.save`` archive of its own, and ``torch.load`` with
``weights_only=True`` costs about 230 µs for each, whatever its size: a dozen per parameter group.

:func:`plain_value` runs a small stack machine over the opcodes ``pickletools.genops`` decodes. It knows only
numbers, booleans, ``None``, strings, tuples and lists, and the memo that shares them; any other opcode (a global,
a call, a dict, bytes) makes it give up. It never imports, calls or builds anything but those values, so it
cannot run code. :func:`read_value` gives the record's bytes back when it gives up, or when the archive is not the
one ``torch.save`` writes for a value (:mod:`.torch_archives`), and the caller reads them with
``torch.load(weights_only=True)`` as before.
"""

from __future__ import annotations

import dataclasses
import functools
import pickletools
from typing import Any

from notebook_accel.checkpointing.verified_reads import RangeReader
from notebook_accel.engines.fsdp.torch_archives import parse_archive, peek

__all__ = ["Plain", "plain_value", "read_value"]

_MARK = object()  # a MARK on the stack
_NUMBERS = {"BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE"}
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_SMALL_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


@dataclasses.dataclass(frozen=True)
class Plain:
    """A value decoded from a record (``value`` may itself be ``None``).

    Attributes:
        value: the value.
    """

    value: Any


class _GiveUp(Exception):
    """The pickle holds something this decoder does not know."""


def _pop_to_mark(stack: list[Any]) -> list[Any]:
    """The items above the topmost MARK, removed with it."""
    for at in range(len(stack) - 1, -1, -1):
        if stack[at] is _MARK:
            items = stack[at + 1:]
            del stack[at:]
            return items
    raise _GiveUp


def _step(name: str, arg: Any, stack: list[Any], memo: dict[int, Any]) -> None:
    """Run one opcode on ``stack`` and ``memo``."""
    if name in _NUMBERS:
        stack.append(arg)
    elif name in _CONSTANTS:
        stack.append(_CONSTANTS[name])
    elif name == "MARK":
        stack.append(_MARK)
    elif name == "EMPTY_TUPLE":
        stack.append(())
    elif name in _SMALL_TUPLES:
        count = _SMALL_TUPLES[name]
        if len(stack) < count or any(item is _MARK for item in stack[-count:]):
            raise _GiveUp
        stack[-count:] = [tuple(stack[-count:])]
    elif name == "TUPLE":
        stack.append(tuple(_pop_to_mark(stack)))
    elif name == "EMPTY_LIST":
        stack.append([])
    elif name in ("APPEND", "APPENDS"):
        items = _pop_to_mark(stack) if name == "APPENDS" else [stack.pop()] if stack else [_MARK]
        if not stack or not isinstance(stack[-1], list) or any(item is _MARK for item in items):
            raise _GiveUp
        stack[-1].extend(items)
    elif name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
        if not stack or stack[-1] is _MARK:
            raise _GiveUp
        memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
    elif name in ("BINGET", "LONG_BINGET") and arg in memo:
        stack.append(memo[arg])
    else:
        raise _GiveUp


@functools.lru_cache(maxsize=256)
def _decoded(pickle_bytes: bytes) -> tuple[bool, Any]:
    """``(True, value)`` for a pickle of plain data only; ``(False, None)`` for anything else. Cached: a state's
    values repeat from group to group (and a list comes back as a fresh copy, see :func:`plain_value`)."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    try:
        ops = iter(pickletools.genops(pickle_bytes))
        if next(ops)[0].name != "PROTO":
            return False, None
        for op, arg, _ in ops:
            if op.name == "STOP":
                return (True, stack[0]) if len(stack) == 1 and stack[0] is not _MARK else (False, None)
            _step(op.name, arg, stack, memo)
    except Exception:  # unknown or garbled (_GiveUp, or genops' own errors): torch.load decides
        return False, None
    return False, None


def _fresh(value: Any) -> Any:
    """A copy of ``value``'s lists (shared ones shared alike), so a cached result is never handed out twice."""
    copies: dict[int, Any] = {}

    def copy(item: Any) -> Any:
        if isinstance(item, list):
            if id(item) not in copies:
                fresh: list[Any] = []
                copies[id(item)] = fresh
                fresh.extend(copy(each) for each in item)
            return copies[id(item)]
        return tuple(copy(each) for each in item) if isinstance(item, tuple) else item

    return copy(value)


def plain_value(pickle_bytes: bytes) -> Plain | None:
    """The value of a pickle that holds plain data only (numbers, booleans, ``None``, strings, tuples, lists),
    decoded without an unpickler; ``None`` for any other pickle.

    Example:
        >>> import pickle
        >>> plain_value(pickle.dumps((0.9, 0.999), protocol=2))
        Plain(value=(0.9, 0.999))
        >>> plain_value(pickle.dumps({"lr": 0.1}, protocol=2)) is None
        True
    """
    known, value = _decoded(pickle_bytes)
    try:
        return Plain(_fresh(value)) if known else None
    except RecursionError:  # lists nested thousands deep: torch.load decides
        return None


def read_value(reader: RangeReader, offset: int, length: int) -> Plain | bytes:
    """The plain value that the record of ``length`` bytes at ``offset`` holds, read through ``reader`` (hashed in
    file order when it checks); or, for a record in any other form, the record's bytes, for ``torch.load``.

    Raises:
        CheckpointError: the file ends inside the record (from ``reader``).
    """
    seen = peek(reader, offset, length)
    archive = parse_archive(*seen, length) if seen is not None else None
    data = reader.read(offset, length)
    if seen is None or archive is None or archive.storage_start is not None or data[:len(seen[0])] != seen[0] \
            or data[len(data) - len(seen[1]):] != seen[1]:
        return data
    value = plain_value(archive.pickle)
    return value if value is not None else data
