"""Collective operations on nested structures of tensors: gather, reduce, broadcast, pad.

Every function works on a tensor or any nesting of dicts, lists and tuples of tensors, and is the identity in a
single process (accelerate's behaviour). Before the real collective, the processes swap a small fixed-size
signature of their tensors (count, dims, dtype) in one cheap all-gather; a mismatch raises
:class:`CollectiveShapeError` listing every rank's shapes instead of hanging or failing deep inside the backend.

We do better than accelerate in one place: :func:`gather` accepts tensors whose first dimension differs between
processes (it pads and trims for you), since the signature already tells every process the others' sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
import torch.distributed as dist

from notebook_accel.argument_checks import checked_number
from notebook_accel.errors import NotebookAccelError, shown
from notebook_accel.plugins import ConfigurationError
from notebook_accel.utils.nested import recursively_apply, tensors_of

__all__ = [
    "CollectiveShapeError",
    "DistributedOperationException",
    "copy_tensor_to_devices",
    "gather",
    "gather_object",
    "reduce",
    "broadcast",
    "broadcast_object_list",
    "pad_across_processes",
]

Reduction = Literal["sum", "mean", "max"]
_REDUCTIONS = ("sum", "mean", "max")
_SIG_LEN = 128  # int64 slots in the fixed-size signature; longer signatures fall back to all_gather_object
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128]


class CollectiveShapeError(NotebookAccelError, RuntimeError):
    """Processes passed tensors that do not fit together in a collective; the message lists each rank's."""


DistributedOperationException = CollectiveShapeError
"""accelerate's name for the same error (``except DistributedOperationException`` catches ours)."""


def _distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _comm_device() -> torch.device:
    """The device small helper tensors must live on for the current backend."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _encode(leaves: Sequence[torch.Tensor]) -> list[int]:
    """``[count, (ndim, dtype code, *shape) per leaf]``."""
    sig = [len(leaves)]
    for t in leaves:
        code = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else 99
        sig += [t.dim(), code, *t.shape]
    return sig


def _decode(sig: list[int]) -> list[tuple[tuple[int, ...], int]]:
    """Undo :func:`_encode`: ``[(shape, dtype code), ...]``."""
    out = []
    pos = 1
    for _ in range(sig[0]):
        ndim, code = sig[pos], sig[pos + 1]
        out.append((tuple(sig[pos + 2 : pos + 2 + ndim]), code))
        pos += 2 + ndim
    return out


def _exchange(leaves: Sequence[torch.Tensor]) -> list[list[tuple[tuple[int, ...], int]]]:
    """Every rank's ``[(shape, dtype code), ...]``, in rank order, with one small all-gather."""
    sig = _encode(leaves)
    fits = len(sig) < _SIG_LEN
    buf = torch.full((_SIG_LEN,), -1, dtype=torch.int64)
    buf[0] = 1 if fits else 0
    if fits:
        buf[1 : 1 + len(sig)] = torch.tensor(sig, dtype=torch.int64)
    buf = buf.to(_comm_device())
    out = [torch.empty_like(buf) for _ in range(dist.get_world_size())]
    dist.all_gather(out, buf)
    rows = [o.tolist() for o in out]
    if all(r[0] == 1 for r in rows):
        return [_decode(r[1:]) for r in rows]
    # some rank's signature is too long for the buffer: every rank takes this slower path together
    objs: list[Any] = [None] * len(rows)
    dist.all_gather_object(objs, sig)
    return [_decode(s) for s in objs]


def _fmt(shapes: list[tuple[tuple[int, ...], int]]) -> str:
    """``[(3, 4) float32, ...]`` for messages."""
    def name(code: int) -> str:
        return str(_DTYPES[code]).replace("torch.", "") if 0 <= code < len(_DTYPES) else "other"
    return "[" + ", ".join(f"{tuple(s)} {name(c)}" for s, c in shapes) + "]"


def _check(op: str, all_shapes: list[list[tuple[tuple[int, ...], int]]], free_dim: int | None, hint: str) -> None:
    """Raise when ranks disagree on count, ndim, dtype, or any dim except ``free_dim`` (None: all must match)."""
    def key(entry: tuple[tuple[int, ...], int]) -> tuple[Any, ...]:
        shape, code = entry
        dims = tuple(d for i, d in enumerate(shape) if i != free_dim)
        return (len(shape), code, dims)

    keys = [[key(e) for e in shapes] for shapes in all_shapes]
    if all(k == keys[0] for k in keys):
        return
    listing = "; ".join(f"rank {r}: {_fmt(s)}" for r, s in enumerate(all_shapes))
    raise CollectiveShapeError(f"{op}: the processes passed tensors that do not match ({listing}). {hint}")


def gather(data: Any) -> Any:
    """All-gather every tensor in ``data`` and concatenate along dim 0, in rank order.

    0-d tensors become shape ``[1]`` per process. First dimensions may differ between processes (padded and
    trimmed here); every other dimension and the dtype must match.

    Raises:
        CollectiveShapeError: tensors differ across ranks in count, dtype or a dimension other than the first.

    Example:
        >>> gather(torch.tensor([1, 2]))   # single process: unchanged
        tensor([1, 2])
    """
    if not _distributed():
        return data
    leaves = tensors_of(data)
    all_shapes = _exchange([t.reshape(1) if t.dim() == 0 else t for t in leaves])
    _check("gather", all_shapes, free_dim=0,
           hint="Every process must pass the same structure of tensors, equal in all dimensions but the first.")
    position = iter(range(len(leaves)))

    def one(t: torch.Tensor) -> torch.Tensor:
        i = next(position)
        sizes = [shapes[i][0][0] for shapes in all_shapes]
        return _gather_one(t.reshape(1) if t.dim() == 0 else t, sizes)

    return recursively_apply(one, data)


def _gather_one(t: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """All-gather one tensor whose first dimension is ``sizes[rank]`` on each rank."""
    longest = max(sizes)
    if t.shape[0] < longest:
        pad = t.new_zeros((longest - t.shape[0], *t.shape[1:]))
        t = torch.cat([t, pad])
    t = t.contiguous()
    parts = [torch.empty_like(t) for _ in sizes]
    dist.all_gather(parts, t)
    if all(s == longest for s in sizes):
        return torch.cat(parts)
    return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)])


def gather_object(obj: Any) -> list[Any]:
    """Gather any picklable object; lists/tuples are concatenated in rank order, other objects collected.

    Example:
        >>> gather_object(["a", "b"])     # single process
        ['a', 'b']
    """
    single = not _distributed()
    per_rank: list[Any] = [obj] if single else [None] * dist.get_world_size()
    if not single:
        dist.all_gather_object(per_rank, obj)
    if all(isinstance(o, (list, tuple)) for o in per_rank):
        return [x for o in per_rank for x in o]
    return per_rank


def reduce(data: Any, reduction: Reduction = "sum", scale: float = 1.0) -> Any:
    """All-reduce every tensor in ``data`` (``"sum"`` default, ``"mean"``, ``"max"``), then multiply by ``scale``.

    Raises:
        ConfigurationError: an unknown ``reduction``.
        CollectiveShapeError: tensors differ across ranks.

    Example:
        >>> reduce(torch.tensor(3.0), "mean")   # single process
        tensor(3.)
    """
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ConfigurationError(f"reduce(reduction={shown(reduction)}): allowed: {', '.join(_REDUCTIONS)}")
    scale = checked_number(scale, "reduce(scale=...)")
    if not _distributed():
        return data if scale == 1.0 else recursively_apply(lambda t: t * scale, data)
    _check("reduce", _exchange(tensors_of(data)), free_dim=None,
           hint="Every process must pass tensors of the same shape and dtype.")
    op = dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM
    n = dist.get_world_size()

    def one(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out, op=op)
        if reduction == "mean":
            out = out / n
        return out * scale if scale != 1.0 else out

    return recursively_apply(one, data)


def broadcast(data: Any, from_process: int = 0) -> Any:
    """Every process gets ``from_process``'s tensors (same shapes needed on every process).

    Raises:
        CollectiveShapeError: tensors differ across ranks.

    Example:
        >>> broadcast(torch.ones(2))   # single process
        tensor([1., 1.])
    """
    if not _distributed():
        return data
    _check("broadcast", _exchange(tensors_of(data)), free_dim=None,
           hint="Every process must pass tensors of the same shape and dtype (e.g. torch.empty on the receivers).")

    def one(t: torch.Tensor) -> torch.Tensor:
        out = t.clone().contiguous()
        dist.broadcast(out, src=from_process)
        return out

    return recursively_apply(one, data)


def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Replace ``objects``' items in place with ``from_process``'s (picklable objects) and return the list."""
    if _distributed():
        dist.broadcast_object_list(objects, src=from_process)
    return objects


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """The main process's ``tensor`` on every process, on each one's device; the others pass ``None``.

    Unlike :func:`broadcast`, the receivers need not know the shape or dtype: they come with it.

    Raises:
        CollectiveShapeError: the main process passed no tensor (or not a tensor).

    Example:
        >>> copy_tensor_to_devices(torch.tensor([1, 2, 3]))   # single process
        tensor([1, 2, 3])
    """
    rank = dist.get_rank() if _distributed() else 0
    if rank == 0 and not isinstance(tensor, torch.Tensor):
        problem = f"copy_tensor_to_devices: the main process passed {type(tensor).__name__}, not a tensor"
        if _distributed():  # the receivers wait for the header: tell them before raising
            broadcast_object_list([problem])
        raise CollectiveShapeError(f"{problem}; pass the tensor on process 0 and None on the others")
    if not _distributed():
        return cast(torch.Tensor, tensor)
    sent = tensor if rank == 0 and isinstance(tensor, torch.Tensor) else None
    header = broadcast_object_list([None if sent is None else (tuple(sent.shape), sent.dtype)])[0]
    if isinstance(header, str):
        raise CollectiveShapeError(f"{header}; pass the tensor on process 0 and None on the others")
    shape, dtype = header
    out = sent.to(_comm_device()).contiguous() if sent is not None else torch.empty(
        shape, dtype=dtype, device=_comm_device())
    if out.numel():  # sent as bytes: gloo has no int16/uint16/complex broadcast, bytes go everywhere
        dist.broadcast(out.reshape(-1).view(torch.uint8), src=0)
    return out


def pad_across_processes(data: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad every tensor along ``dim`` to the largest size any process has, so they can be gathered.

    Tensors with fewer than ``dim + 1`` dimensions are returned unchanged.

    Raises:
        CollectiveShapeError: tensors differ across ranks in count, dtype or number of dimensions.

    Example:
        >>> pad_across_processes(torch.ones(2, 3), dim=1).shape   # single process
        torch.Size([2, 3])
    """
    if not _distributed():
        return data
    leaves = tensors_of(data)
    all_shapes = _exchange(leaves)
    counts = {len(s) for s in all_shapes}
    ndims = [[(len(shape), code) for shape, code in shapes] for shapes in all_shapes]
    if len(counts) > 1 or any(n != ndims[0] for n in ndims):
        _check("pad_across_processes", all_shapes, free_dim=None,
               hint="Every process must pass the same structure, dtypes and number of dimensions.")
    position = iter(range(len(leaves)))

    def one(t: torch.Tensor) -> torch.Tensor:
        i = next(position)
        if dim >= t.dim():
            return t
        longest = max(shapes[i][0][dim] for shapes in all_shapes)
        if t.shape[dim] == longest:
            return t
        pad_shape = list(t.shape)
        pad_shape[dim] = longest - t.shape[dim]
        pad = t.new_full(pad_shape, pad_index)
        return torch.cat([pad, t] if pad_first else [t, pad], dim=dim)

    return recursively_apply(one, data)
