"""One DCP call for an FSDP model and the optimizers that train it: one plan, one ``.metadata``, one file per rank.

Since checkpoint format 4 a sharded model ``i`` and every optimizer that trains it are written together:
``fsdp_state_<i>_rank<r>_0.distcp`` (rank ``r``'s shards of all of them) and ``fsdp_state_<i>.metadata``, holding
the DCP state ``{"model": <model state>, "optimizer_<j>": <optimizer j's state>}``. Each object keeps its own
manifest entry (kind, index, type), and the entries of one group name the same files. Writing them as one state
costs one planning round, one metadata file and one file per rank instead of one per object; reading them, one.

The objects are still saved and loaded one by one (``Saved.write``/``Saved.read``), so the group collects: every
part's ``write`` hands over its state, and the last part's write saves them all; the first part's ``read`` loads
them all (into fresh tensors) and every part takes its own. All parts are known before the first write or read
(the checkpoint's objects are collected first), so "the last" is well defined and the same on every rank.

Checkpoints written before (format 3 and older: ``pytorch_model_fsdp_<i>_rank<r>_0.distcp`` and
``optimizer_<j>_rank<r>_0.distcp``, one DCP call each) are read by :mod:`.checkpoint`'s per-object readers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from notebook_accel.checkpointing.manifest import Entry, Kind
from notebook_accel.checkpointing.saved import Saved
from notebook_accel.engines.fsdp.dtensors import empty_like
from notebook_accel.engines.fsdp.storage import load_sharded, metadata_file, save_sharded, shard_files

__all__ = ["JointShards", "joint_name", "fresh_tensors"]


def joint_name(index: int) -> str:
    """The stem of model ``index``'s joint files (``fsdp_state_<index>``)."""
    return f"fsdp_state_{index}"


class JointShards:
    """The joint DCP state of FSDP model ``index`` and its optimizers (see the module docstring).

    Args:
        index: the model's index (names the files).
    """

    def __init__(self, index: int) -> None:
        self.name = joint_name(index)
        self._templates: dict[str, Callable[[], dict[str, Any]]] = {}
        self._labels: list[str] = []
        self._written: dict[str, Any] = {}
        self._read: tuple[str, dict[str, Any]] | None = None

    def label(self) -> str:
        """Every part's label, for errors (``model 0 (TinyNet) with optimizer 0 (AdamW)``)."""
        return " with ".join(self._labels)

    def part(self, key: str, kind: Kind, index: int, type_name: str, get: Callable[[], dict[str, Any]],
             set_state: Callable[[dict[str, Any]], None]) -> Saved:
        """Add part ``key`` (``"model"``, ``"optimizer_<j>"``): object ``index`` of ``kind``, whose live state
        ``get`` returns and ``set_state`` applies; its checkpoint object, whose entry names the joint files."""
        entry = Entry(kind=kind, index=index, file=shard_files(self.name), type_name=type_name, per_rank=True,
                      shared_files=(metadata_file(self.name),))
        self._templates[key] = get
        self._labels.append(entry.label())
        return Saved(entry, get, lambda state: [], set_state, write=self._writer(key), read=self._reader(key),
                     checks_while_reading=True)

    def _writer(self, key: str) -> Callable[[str, Any], None]:
        def write(directory: str, state: dict[str, Any]) -> None:
            self._written[key] = state
            if len(self._written) == len(self._templates):  # the last part: save them all, in a fixed order
                states, self._written = self._written, {}
                save_sharded({k: states[k] for k in self._templates}, directory, self.name, self.label())

        return write

    def _reader(self, key: str) -> Callable[[str], Any]:
        def read(directory: str) -> dict[str, Any]:
            if self._read is None or self._read[0] != directory:
                template = {k: fresh_tensors(get()) for k, get in self._templates.items()}
                self._read = (directory, load_sharded(template, directory, self.name, self.label()))
            loaded = self._read[1]
            state = loaded.pop(key)
            if not loaded:
                self._read = None  # every part has its state: hold no tensors longer than the load
            return state

        return read


def fresh_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """Empty tensors with the shapes, dtypes and sharding of ``state``'s (other values as they are): a load reads
    into them, so nothing live changes before every rank has read and checked its part."""
    return tree_map_only(torch.Tensor, empty_like, state)
