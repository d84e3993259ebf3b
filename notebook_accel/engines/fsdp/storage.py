"""``torch.distributed.checkpoint`` (DCP) files named after the object they hold, flat in the checkpoint folder.

DCP's file writer names its files ``__<rank>_0.distcp`` and ``.metadata`` inside a folder of their own (accelerate
uses a subfolder per object). A checkpoint here holds only plain file names in one folder, so the writer and
reader below give every file the object's name instead: ``<name>_rank<r>_0.distcp`` (one per rank, that rank's
shards) and ``<name>.metadata``. Everything else (planning, resharding) is DCP's own, except what it would
unpickle in full: the reader reads the metadata, and the planner the non-tensor values, as plain data only, and
the planner refuses a checkpoint whose keys, shapes or dtypes differ from the live state (see :mod:`.dcp_safety`).
The writer hashes each shard file (XXH3-128) on its way to disk, so a save reads no shard back for its manifest
(and writes it with few Python calls and no zip CRCs, :mod:`.shard_writer`);
the reader reads each file's records in file order, each once, and checks the checksum of a file this rank owes
on the way, so a load reads no shard twice (:mod:`~notebook_accel.checkpointing.verified_reads`). A tensor record
is read straight into a fresh tensor (:mod:`.tensor_records`) and a plain value decoded from its opcodes
(:mod:`.plain_values`), so a load unpickles nothing; a record in any other form goes to ``torch.load`` with
``weights_only=True``, as in DCP's own reader.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import warnings
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from notebook_accel.checkpointing import writer_group
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.verified_reads import RangeReader, expected_digest
from notebook_accel.engines.fsdp.dcp_safety import CheckedLoadPlanner, metadata_problems, read_metadata
from notebook_accel.engines.fsdp.plain_values import Plain, read_value
from notebook_accel.engines.fsdp.shard_writer import write_shard_file
from notebook_accel.engines.fsdp.tensor_records import read_tensor

__all__ = ["shard_files", "metadata_file", "save_sharded", "load_sharded"]


def shard_files(name: str) -> str:
    """The per-rank file pattern (with ``{rank}``) of object ``name``."""
    return f"{name}_rank{{rank}}_0.distcp"


def metadata_file(name: str) -> str:
    """The metadata file of object ``name`` (written once, by the coordinating rank)."""
    return f"{name}.metadata"


class _NamedWriter(dcp.FileSystemWriter):
    """DCP's file writer, every file named after the object, each rank's shard file written by
    :func:`~.shard_writer.write_shard_file` (hashed while it is written, no zip CRCs, few Python calls)."""

    def __init__(self, directory: str, name: str) -> None:
        super().__init__(directory, single_file_per_rank=True, thread_count=1)
        self.object_name = name

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Write this rank's records into its one file ``<name>_rank<r>_0.distcp`` (durable when it returns)."""
        relative = f"{plan.storage_data.prefix}0.distcp"
        done: Future[list[WriteResult]] = Future()
        done.set_result(write_shard_file(os.path.join(self.path, relative), relative, plan.items, planner))
        return done

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Each rank's files start with ``<name>_rank<r>_`` (DCP's own prefix is ``__<r>_``)."""
        plans = super().prepare_global_plan(plans)
        return [dataclasses.replace(plan, storage_data=dataclasses.replace(
            plan.storage_data, prefix=f"{self.object_name}_rank{rank}_")) for rank, plan in enumerate(plans)]

    def _get_metadata_path(self, rank: int | None = None) -> os.PathLike[str]:
        return Path(self.path) / metadata_file(self.object_name)


class _NamedReader(dcp.FileSystemReader):
    """DCP's file reader for files written by :class:`_NamedWriter`, which reads the metadata as plain data."""

    def __init__(self, directory: str, name: str, label: str) -> None:
        super().__init__(directory)
        self.object_name = name
        self.label = label

    def _get_metadata_path(self, rank: int | None = None) -> os.PathLike[str]:
        return Path(self.path) / metadata_file(self.object_name)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The object's metadata, unpickled with only DCP's metadata classes allowed and checked field by field.

        Raises:
            CheckpointError: it holds anything else, or points at files other than the object's shards.
        """
        path = self._get_metadata_path()
        try:
            with open(path, "rb") as stream:
                metadata = read_metadata(stream)
        except OSError as e:
            raise CheckpointError(f"{self.label}: could not read {os.fspath(path)!r}: {e}") from e
        except Exception as e:  # refused globals, truncated or garbled pickles
            raise CheckpointError(f"{self.label}: {os.path.basename(path)} is not sharded-checkpoint metadata as "
                                  f"DCP writes it ({type(e).__name__}: {str(e)[:200]}); it was not loaded, since "
                                  "anything else could run code when unpickled") from e
        shards = re.compile(re.escape(self.object_name) + r"_rank\d{1,6}_0\.distcp")
        problems = metadata_problems(metadata, shards)
        if problems:
            raise CheckpointError(f"{self.label}: {os.path.basename(path)} is malformed: " + "; ".join(problems))
        storage_meta = metadata.storage_meta if isinstance(metadata.storage_meta, StorageMeta) else StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read this rank's records file by file, in file order, each with one system call, into ``planner``'s
        targets; a file whose checksum this rank owes (:func:`expected_digest`) is checked on the way.

        Raises:
            CheckpointError: a file is damaged or truncated, or a record does not fit its target.
        """
        per_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for relative_path, items in per_file.items():
            path = os.path.join(self.path, relative_path)
            items.sort(key=lambda item: self.storage_data[item.storage_index].offset)
            with RangeReader(path, expected_digest(path)) as reader:
                last: tuple[tuple[int, int], torch.Tensor | bytes] | None = None
                for item in items:
                    info = self.storage_data[item.storage_index]
                    where = (info.offset, info.length)
                    if item.type == LoadItemType.BYTE_IO:
                        _load_value(planner, item, reader, where)
                        continue
                    if last is None or last[0] != where:  # a record two targets take parts of is read once
                        last = where, read_tensor(reader, *where)
                    _load_tensor(planner, item, last[1], self.label)
                reader.finish()
        done: Future[None] = Future()
        done.set_result(None)
        return done


def _part(tensor: torch.Tensor, offsets: Any, lengths: Any) -> torch.Tensor:
    """The block of ``tensor`` at ``offsets`` with ``lengths`` (a view; the whole tensor when they cover it)."""
    for dim, (start, length) in enumerate(zip(offsets, lengths, strict=True)):
        if start != 0 or length != tensor.size(dim):
            tensor = tensor.narrow(dim, start, length)
    return tensor


def _load_value(planner: LoadPlanner, item: ReadItem, reader: RangeReader, where: tuple[int, int]) -> None:
    """Hand one non-tensor record to ``planner``: decoded when it is plain data (:func:`read_value`), else its
    bytes, which the planner reads with ``torch.load(weights_only=True)``."""
    if not isinstance(planner, CheckedLoadPlanner):
        planner.load_bytes(item, io.BytesIO(reader.read(*where)))
        return
    record = read_value(reader, *where)
    if isinstance(record, Plain):
        planner.load_value(item, record.value)
    else:
        planner.load_bytes(item, io.BytesIO(record))


def _load_tensor(planner: LoadPlanner, item: ReadItem, record: torch.Tensor | bytes, label: str) -> None:
    """Hand one tensor record to ``planner`` (as :func:`read_tensor` read it, or its bytes, which ``torch.load``
    reads as plain data only): as the value of the target it fills whole, or else copied into its part of the
    target."""
    whole = record if isinstance(record, torch.Tensor) else \
        torch.load(io.BytesIO(record), map_location="cpu", weights_only=True)
    tensor = _part(whole, item.storage_offsets, item.lengths)
    if isinstance(planner, CheckedLoadPlanner) and planner.adopt(item, tensor):
        return  # the fresh tensor the record was read into is the value: no copy into the template
    target = planner.resolve_tensor(item).detach()
    if target.size() != tensor.size():
        raise CheckpointError(f"{label}: the record of {item.storage_index.fqn!r} holds {tuple(tensor.size())}, "
                              f"its target here is {tuple(target.size())}")
    target.copy_(tensor)
    planner.commit_tensor(item, target)


def _first_failure(e: BaseException) -> tuple[str, BaseException]:
    """``("rank <r>: ", cause)`` of the first failing rank of a DCP failure (``("", e)`` for another error)."""
    if isinstance(e, CheckpointException) and e.failures:
        rank, (cause, _) = next(iter(sorted(e.failures.items())))
        return f"rank {rank}: ", cause
    return "", e


def _reason(e: BaseException) -> str:
    """One line for a DCP failure: the first failing rank's own exception (DCP's text holds every traceback)."""
    where, cause = _first_failure(e)
    return f"{where}{type(cause).__name__}: {str(cause)[:300]}"


def _no_dist() -> bool:
    """True in a single process without a process group (one process saving or loading a sharded checkpoint)."""
    return not (dist.is_available() and dist.is_initialized())


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[None]:
    """DCP warns that it assumes one process whenever no group is up; here that is the intended case."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def save_sharded(state: dict[str, Any], directory: str, name: str, label: str) -> None:
    """Write every rank's shards of ``state`` into ``directory`` (collective; DCP agrees on failures itself).

    Raises:
        CheckpointError: on every rank, naming the first failing rank's error.
    """
    try:
        with _single_process_quiet():
            dcp.save(state, storage_writer=_NamedWriter(directory, name), no_dist=_no_dist(),
                     process_group=writer_group.current())  # a background writer's own group
    except (Exception, CheckpointException) as e:  # DCP's own error is a BaseException
        raise CheckpointError(f"{label}: writing its sharded state failed ({_reason(e)})") from e


def load_sharded(template: dict[str, Any], directory: str, name: str, label: str) -> dict[str, Any]:
    """Read object ``name`` from ``directory`` into ``template`` (fresh tensors, sharded like the live ones).

    Raises:
        CheckpointError: on every rank, e.g. for a missing or an extra key, a shape that does not fit, or a file
            that holds anything but plain data.
    """
    try:
        with _single_process_quiet():
            dcp.load(template, storage_reader=_NamedReader(directory, name, label), planner=CheckedLoadPlanner(label),
                     no_dist=_no_dist())
    except (Exception, CheckpointException) as e:  # DCP's own error is a BaseException
        where, cause = _first_failure(e)
        if isinstance(cause, CheckpointError):  # the checks of the reader and planner say what failed
            raise CheckpointError(f"{cause} (found on {where.rstrip(': ') or 'this process'})") from e
        raise CheckpointError(f"{label}: the sharded state does not fit this model ({_reason(e)})") from e
    return template
