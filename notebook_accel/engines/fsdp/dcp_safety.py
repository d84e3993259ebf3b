"""Reading a sharded (DCP) checkpoint without running code from it, and refusing one that does not fit.

``torch.distributed.checkpoint`` reads two kinds of pickles, both in full (``pickle.load``, ``torch.load(...,
weights_only=False)``), so a crafted file would run code when loaded:

* the ``.metadata`` file: read here by :func:`read_metadata` with an unpickler that finds only the classes DCP
  writes there (its metadata dataclasses, ``torch.Size``, dtypes, layouts, paths); anything else is refused before
  it is built. The result is then checked field by field (types, plain shard file names of this object, no
  stream transforms), so DCP never opens a file outside the object's own shards;
* the non-tensor values inside the ``.distcp`` shards (an optimizer's ``param_groups``): read by
  :class:`CheckedLoadPlanner` with ``torch.load(weights_only=True)``, each of the type the live value has.

The same planner compares the saved keys, shapes and dtypes with the live state before any shard is read: a
checkpoint with an extra or a missing key (``aux.weight``), another shape or dtype is refused, as for a plain
model, instead of being loaded with the extra weights dropped or cast.
"""

from __future__ import annotations

import io
import pickle
import re
from typing import IO, Any

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.tensor import DTensor

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.engines.fsdp.dtensors import local_part, with_local

__all__ = ["read_metadata", "metadata_problems", "fit_problems", "CheckedLoadPlanner", "UnsafeMetadataError"]

_METADATA_CLASSES = ("Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")
#: module -> names the metadata pickle may refer to: what DCP's ``FileSystemWriter`` writes, nothing more.
ALLOWED_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset(_METADATA_CLASSES),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch": frozenset({"Size"}),  # and every torch dtype, see _find
    "torch.serialization": frozenset({"_get_layout"}),  # a layout by its name (torch.strided)
    "pathlib": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path"}),
    "pathlib._local": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path"}),
    "collections": frozenset({"OrderedDict"}),
}


class UnsafeMetadataError(pickle.UnpicklingError):
    """The metadata pickle refers to a global outside :data:`ALLOWED_GLOBALS` (it could run code)."""


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals DCP's metadata holds."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if name in ALLOWED_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        raise UnsafeMetadataError(f"it refers to {module}.{name}, which DCP's metadata never holds (only its "
                                  "metadata classes, torch.Size, dtypes, layouts and paths)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeMetadataError("it holds a persistent reference, which DCP's metadata never holds")


def read_metadata(stream: IO[bytes]) -> dcp_metadata.Metadata:
    """Unpickle DCP metadata from ``stream``, resolving only :data:`ALLOWED_GLOBALS`.

    Raises:
        UnsafeMetadataError: it refers to anything else (nothing of it was built or run).
        pickle.UnpicklingError, EOFError, ValueError, TypeError: it is not a pickle DCP wrote.
    """
    metadata = _MetadataUnpickler(stream).load()
    if not isinstance(metadata, dcp_metadata.Metadata):
        raise pickle.UnpicklingError(f"it holds a {type(metadata).__name__}, not DCP's Metadata")
    return metadata


def _size_problem(value: Any, what: str, fqn: str) -> str | None:
    """The problem of ``value`` (``what`` of tensor ``fqn``) unless it is a torch.Size of non-negative ints; the
    text is made only for a bad one (a load checks thousands)."""
    if not isinstance(value, torch.Size) or any(not isinstance(n, int) or n < 0 for n in value):
        return f"{what} of {fqn!r} is {value!r:.60}, not a torch.Size of non-negative ints"
    return None


def _tensor_problems(fqn: str, md: dcp_metadata.TensorStorageMetadata) -> list[str]:
    problems = [_size_problem(md.size, "the size", fqn)]
    if not isinstance(md.properties, dcp_metadata.TensorProperties) or not isinstance(md.properties.dtype,
                                                                                       torch.dtype):
        problems.append(f"the properties of {fqn!r} are not TensorProperties with a dtype")
    if not isinstance(md.chunks, list) or not all(isinstance(c, dcp_metadata.ChunkStorageMetadata)
                                                  for c in md.chunks):
        return [p for p in problems if p] + [f"the chunks of {fqn!r} are not a list of ChunkStorageMetadata"]
    for chunk in md.chunks:
        problems += [_size_problem(chunk.offsets, "a chunk offset", fqn),
                     _size_problem(chunk.sizes, "a chunk size", fqn)]
    return [p for p in problems if p]


def _storage_problems(storage: Any, shard_file: re.Pattern[str]) -> list[str]:
    if not isinstance(storage, dict):
        return [f"its storage_data is a {type(storage).__name__}, not a dict"]
    for index, info in storage.items():
        if not isinstance(index, dcp_metadata.MetadataIndex) or not isinstance(index.fqn, str):
            return [f"its storage_data has the key {index!r:.80}, not a MetadataIndex"]
        if not isinstance(info, _StorageInfo) or not isinstance(info.relative_path, str):
            return [f"the storage of {index.fqn!r} is {info!r:.80}, not a _StorageInfo"]
        if not shard_file.fullmatch(info.relative_path):
            return [f"the storage of {index.fqn!r} is in {info.relative_path!r:.80}, which is not one of this "
                    "object's shard files"]
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in (info.offset, info.length)):
            return [f"the storage of {index.fqn!r} has offset {info.offset!r:.30} and length {info.length!r:.30}"]
        if info.transform_descriptors:  # the writer here never compresses or transforms
            return [f"the storage of {index.fqn!r} is transformed ({info.transform_descriptors!r:.80}); this "
                    "checkpoint's writer never transforms its shards"]
    return []


def metadata_problems(metadata: dcp_metadata.Metadata, shard_file: re.Pattern[str]) -> list[str]:
    """Everything in ``metadata`` that DCP's writer here never writes (empty when it is well formed).

    ``shard_file``: the names its storage may point at (the object's own ``.distcp`` files).
    """
    entries = metadata.state_dict_metadata
    if not isinstance(entries, dict):
        return [f"its state_dict_metadata is a {type(entries).__name__}, not a dict"]
    problems: list[str] = []
    for fqn, md in entries.items():
        if not isinstance(fqn, str):
            problems.append(f"it has the key {fqn!r:.60}, not a string")
        elif isinstance(md, dcp_metadata.TensorStorageMetadata):
            problems += _tensor_problems(fqn, md)
        elif not isinstance(md, dcp_metadata.BytesStorageMetadata):
            problems.append(f"the entry of {fqn!r} is a {type(md).__name__}, not tensor or bytes storage")
    return (problems + _storage_problems(metadata.storage_data, shard_file))[:10]


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def fit_problems(template: dict[str, Any], metadata: dcp_metadata.Metadata) -> list[str]:
    """Every difference between the flattened live state ``template`` and what ``metadata`` holds: keys, tensor
    or not, full shapes and dtypes (empty when the checkpoint fits)."""
    saved = metadata.state_dict_metadata
    missing = sorted(set(template) - set(saved))
    unexpected = sorted(set(saved) - set(template))
    problems = []
    if missing or unexpected:
        problems.append(f"keys differ (missing in the checkpoint: {missing[:5]}, unexpected: {unexpected[:5]}); "
                        "build the same model (and optimizer) as the saving run before load_state")
    for key in sorted(set(template) & set(saved)):
        live, md = template[key], saved[key]
        if _is_tensor(live) != isinstance(md, dcp_metadata.TensorStorageMetadata):
            problems.append(f"{key} is {'a tensor' if _is_tensor(live) else 'not a tensor'} here, "
                            f"{'not ' if _is_tensor(live) else ''}in the checkpoint")
        elif not isinstance(md, dcp_metadata.TensorStorageMetadata):
            continue
        elif tuple(live.shape) != tuple(md.size):
            problems.append(f"{key} has shape {tuple(md.size)} in the checkpoint, {tuple(live.shape)} here")
        elif live.dtype != md.properties.dtype:
            problems.append(f"{key} has dtype {md.properties.dtype} in the checkpoint, {live.dtype} here; cast the "
                            "model as in the saving run before load_state")
    return problems[:10]


class CheckedLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, which first refuses a checkpoint that does not fit the live state
    (:func:`fit_problems`) and reads non-tensor values as plain data of the live value's type.

    Args:
        label: the object's name in errors (``model 0 (TinyNet)``).
    """

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def set_up_planner(self, state_dict: dict[str, Any], metadata: dcp_metadata.Metadata | None = None,
                       is_coordinator: bool = False) -> None:
        """Flatten the live state as DCP does, then compare it with ``metadata``.

        Raises:
            CheckpointError: the checkpoint does not fit (on the rank that found it; DCP reports it on every rank).
        """
        super().set_up_planner(state_dict, metadata, is_coordinator)
        problems = ["there is no metadata"] if metadata is None else fit_problems(self.state_dict, metadata)
        if problems:
            raise CheckpointError(f"{self.label}: the sharded state does not fit this model: " + "; ".join(problems))

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        """Read one non-tensor value with ``torch.load(weights_only=True)`` and check its type.

        Raises:
            CheckpointError: the value holds anything but plain data (it could run code when unpickled), or is of
                another type than the live one.
        """
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except Exception as e:
            raise CheckpointError(f"{self.label}: the value of {fqn!r} in its shards cannot be read as plain data "
                                  f"({type(e).__name__}: {str(e)[:200]}); it was not loaded, since it could run "
                                  "code when unpickled") from e
        self.load_value(read_item, loaded)

    def load_value(self, read_item: ReadItem, loaded: Any) -> None:
        """Take ``loaded``, one non-tensor value already read as plain data, after checking its type.

        Raises:
            CheckpointError: it is of another type than the live one.
        """
        fqn = read_item.dest_index.fqn
        live = self.state_dict.get(fqn)
        if live is not None and type(loaded) is not type(live):
            raise CheckpointError(f"{self.label}: {fqn} is a {type(loaded).__name__} in the checkpoint, a "
                                  f"{type(live).__name__} here")
        self._replace(fqn, loaded)

    def _replace(self, fqn: str, value: Any) -> None:
        """Make ``value`` the template's value of ``fqn`` (flattened and nested)."""
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], value)
        self.state_dict[fqn] = value

    def adopt(self, read_item: ReadItem, tensor: torch.Tensor) -> bool:
        """Make ``tensor`` (a record just read into memory of its own) the value of the target it fills whole, in
        place of the template's tensor, which is then never written: one copy of the record fewer.

        Returns ``False`` (the caller copies ``tensor`` into its target) when it fills only a part of the target
        (a resharded load), is a view into a larger record, differs from it in dtype, device or layout, or sits
        under an int key of a dict.
        """
        fqn = read_item.dest_index.fqn
        value = self.state_dict.get(fqn)
        local = local_part(value) if isinstance(value, DTensor) else value
        if not isinstance(local, torch.Tensor) or any(read_item.dest_offsets) \
                or tuple(read_item.lengths) != tuple(local.shape) or tensor.shape != local.shape \
                or tensor.dtype != local.dtype or tensor.device != local.device \
                or not (tensor.is_contiguous() and local.is_contiguous()) or tensor.storage_offset() != 0 \
                or tensor.untyped_storage().nbytes() != tensor.nbytes:
            return False
        if not self._reaches(fqn, value):
            return False  # a path through an int key of a dict (DCP names it as a string): written in place instead
        if isinstance(value, DTensor):
            tensor = with_local(value, tensor)
        self._replace(fqn, tensor)
        return True

    def _reaches(self, fqn: str, value: Any) -> bool:
        """Whether ``fqn``'s path leads to ``value`` in the nested state, so :meth:`_replace` puts a new value in
        its place (DCP's path names an int key of a dict as a string, which would add a key beside it)."""
        if not self.flatten_state_dict:
            return True
        container: Any = self.original_state_dict
        for key in self.mappings[fqn]:
            try:
                container = container[key]
            except (KeyError, IndexError, TypeError):
                return False
        return container is value
