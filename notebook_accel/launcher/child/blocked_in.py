"""What a thread is blocked in, read from its stack: the collective as users call it, and the user's line.

The collective is the *outermost* frame of torch's collectives module (``distributed_c10d``) or of DeepSpeed's
``deepspeed.comm`` with a public name, so ``all_gather_object`` is named rather than the ``all_gather`` it calls.
The Accelerator's ``reduce``, ``gather`` and ``broadcast`` first exchange their tensors' shapes (an ``all_gather``):
they are named by the collective they stand for (``all_reduce``...), wherever they wait. A thread inside autograd's
``backward`` of a process with a process group waits for DDP's gradient all-reduce (:data:`DDP_BACKWARD`): the
reducer sends the buckets from C++, so no collective frame is on the stack. Otherwise the thread is in no
collective.

The user's line is the innermost frame of the user's code (:func:`~.user_frames.is_user_file`: not this package,
torch or the standard library) outside the collective, with the call it is making there (``accelerator.reduce``,
``time.sleep``: the source span of the instruction it stopped at, as a traceback's ``^^^^`` marks it).
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
from dataclasses import dataclass
from types import FrameType

from notebook_accel.launcher.child.user_frames import is_user_file

__all__ = ["Place", "blocked_in", "DDP_BACKWARD"]

DDP_BACKWARD = "DDP's gradient all-reduce"  # what backward waits for
_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
_DEEPSPEED_COMM = os.sep + os.path.join("deepspeed", "comm") + os.sep
_AUTOGRAD = os.sep + os.path.join("torch", "autograd") + os.sep
_OPS = os.path.join("notebook_accel", "ops.py")  # the Accelerator's collectives: by what they stand for
_OP_NAMES = {"reduce": "all_reduce", "gather": "all_gather", "broadcast": "broadcast"}
_WRAPPERS = frozenset({"wrapper", "inner", "decorate_context", "_fn", "fn", "log_wrapper", "timed_op"})
_MAX_CALL = 48  # characters of a line shown when no call can be read from it


@dataclass(frozen=True)
class Place:
    """Where a thread is: the collective it waits in (``""``: none), the call on the user's line, and that line."""

    collective: str
    call: str
    file: str
    line: int


def _stack(frame: FrameType) -> list[FrameType]:
    """The frames from the outermost to ``frame``."""
    out: list[FrameType] = []
    current: FrameType | None = frame
    while current is not None:
        out.append(current)
        current = current.f_back
    return out[::-1]


def _group_initialised() -> bool:
    """Whether this process has a torch.distributed process group (without importing torch)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def _collective(frame: FrameType) -> str:
    """The collective ``frame`` is, as users call it, or ``""``."""
    name, filename = frame.f_code.co_name, frame.f_code.co_filename
    public = not name.startswith("_") and name not in _WRAPPERS
    if public and (filename.endswith(_C10D) or _DEEPSPEED_COMM in filename):
        return name
    if name in _OP_NAMES and filename.endswith(_OPS):
        return _OP_NAMES[name]
    if name in ("backward", "_engine_run_backward") and _AUTOGRAD in filename and _group_initialised():
        return DDP_BACKWARD
    return ""


def call_on(filename: str, line: int) -> str:
    """The outermost call written on ``filename``'s ``line`` (``"accelerator.reduce"``), else the line itself cut
    short; ``""`` when the source cannot be read.

    Example:
        >>> import linecache
        >>> linecache.cache["<demo>"] = (0, None, ["x = torch.ones(1)\\n", "for b in loader:\\n"], "<demo>")
        >>> call_on("<demo>", 1), call_on("<demo>", 2)
        ('torch.ones', 'for b in loader:')
    """
    text = linecache.getline(filename, line).strip()
    for source in (text, text + "\n    pass"):  # a `for`/`with`/`if` line is whole with a body
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        call = next((node for node in ast.walk(tree) if isinstance(node, ast.Call)), None)
        if call is not None:
            return ast.unparse(call.func)
        break
    return text if len(text) <= _MAX_CALL else text[: _MAX_CALL - 3] + "..."


def _source(filename: str, first: int, last: int, start: int, end: int) -> str:
    """The source from line ``first``'s byte ``start`` to line ``last``'s byte ``end`` (Python's offsets are in
    UTF-8 bytes)."""
    lines = [linecache.getline(filename, n).encode() for n in range(first, last + 1)]
    if len(lines) == 1:
        return lines[0][start:end].decode(errors="replace")
    return b"".join([lines[0][start:], *lines[1:-1], lines[-1][:end]]).decode(errors="replace")


def call_at(frame: FrameType) -> str:
    """The call ``frame`` is making now (``"time.sleep"``: the instruction it stopped at spans that call), else the
    outermost call on its line (:func:`call_on`)."""
    positions = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2  # one position per two-byte code unit
    first, last, start, end = positions[index] if 0 <= index < len(positions) else (None, None, None, None)
    if first is not None and last is not None and start is not None and end is not None:
        try:
            node = ast.parse(_source(frame.f_code.co_filename, first, last, start, end).strip(), mode="eval").body
        except SyntaxError:
            node = None
        if isinstance(node, ast.Call):
            return ast.unparse(node.func)
    return call_on(frame.f_code.co_filename, frame.f_lineno)


def blocked_in(frame: FrameType) -> Place:
    """Where the thread whose innermost frame is ``frame`` is (see the module's description)."""
    stack = _stack(frame)
    found = next(((i, name) for i, f in enumerate(stack) if (name := _collective(f))), (len(stack), ""))
    outside = stack[: found[0]]
    user = next((f for f in reversed(outside) if is_user_file(f.f_code.co_filename)), None)
    at = user or (outside[-1] if outside else frame)
    filename = at.f_code.co_filename
    return Place(found[1], call_at(at), filename, at.f_lineno)
