"""The manifest: ``manifest.json``, the list of what a checkpoint holds, written last, checked first.

It records the format version, the world size, every saved object (kind, index, file, type name), and the size
and SHA-256 of every file. Its presence with ``"complete": true`` in a directory whose name is not temporary is
the completion marker; :func:`read_manifest` refuses anything else with a clear :class:`CheckpointError`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from notebook_accel.checkpointing.atomic import file_digest, write_bytes
from notebook_accel.checkpointing.errors import CheckpointError

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "Kind", "Entry", "Manifest", "read_manifest", "write_manifest"]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"

Kind = Literal["model", "optimizer", "scheduler", "dataloader", "scaler", "custom", "rng"]
KINDS: tuple[str, ...] = get_args(Kind)


@dataclass(frozen=True)
class Entry:
    """One saved object.

    Attributes:
        kind: what it is (``"model"``, ``"optimizer"``, ...).
        index: its position among the prepared/registered objects of that kind.
        file: the file name; for per-rank entries a pattern with ``{rank}``.
        type_name: the class name of the saved object (for error messages and type checks).
        per_rank: True when every rank writes its own file (RNG and loader states, FSDP shards).
        shared_files: more files of the object written once (the metadata of a sharded FSDP state).
    """

    kind: Kind
    index: int
    file: str
    type_name: str
    per_rank: bool = False
    shared_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared_files", tuple(self.shared_files))  # a list when read back from JSON
        for name in self.shared_files:
            if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
                raise ValueError(f"shared file name {name!r:.60} is not a plain file name inside the checkpoint")

    def files(self, world_size: int) -> list[str]:
        """The concrete file names of this entry."""
        if self.per_rank:
            return [self.file.format(rank=r) for r in range(world_size)] + list(self.shared_files)
        return [self.file, *self.shared_files]

    def label(self) -> str:
        """A short human name, e.g. ``optimizer 0 (SGD)``."""
        return f"{self.kind} {self.index} ({self.type_name})"


@dataclass
class Manifest:
    """The contents of ``manifest.json``.

    Attributes:
        world_size: number of processes that saved the checkpoint.
        entries: every saved object.
        files: file name -> ``{"size": int, "sha256": str}`` for every file of the checkpoint.
        step: the Accelerator's ``step`` counter at save time.
        iteration: the automatic-naming iteration of this checkpoint (``None`` for an explicit ``output_dir``).
        format_version: :data:`FORMAT_VERSION` of the writer.
        complete: the completion marker; always True in a committed checkpoint.
        created: Unix time of the save.
    """

    world_size: int
    entries: list[Entry]
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    step: int = 0
    iteration: int | None = None
    format_version: int = FORMAT_VERSION
    complete: bool = True
    created: float = field(default_factory=time.time)

    def to_json(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        """Parse JSON text (from the file ``where``, named in errors)."""
        try:
            raw = json.loads(text)
            entries = [Entry(**e) for e in raw.pop("entries")]
            manifest = cls(entries=entries, **raw)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise CheckpointError(f"the manifest {where!r} is corrupt ({type(e).__name__}: {e}); the checkpoint "
                                  "cannot be trusted: load an older one.") from e
        bad = [e.kind for e in manifest.entries if e.kind not in KINDS]
        if bad:
            raise CheckpointError(f"the manifest {where!r} names unknown object kinds {bad}; allowed: {list(KINDS)}")
        return manifest

    def entries_of(self, kind: Kind) -> list[Entry]:
        """The entries of one kind, in index order."""
        return sorted((e for e in self.entries if e.kind == kind), key=lambda e: e.index)

    def all_files(self) -> list[str]:
        """Every file the entries name."""
        return [name for e in self.entries for name in e.files(self.world_size)]

    def record_files(self, directory: str) -> None:
        """Fill :attr:`files` with the size and SHA-256 of every file, read from ``directory``."""
        for name in self.all_files():
            size, digest = file_digest(os.path.join(directory, name))
            self.files[name] = {"size": size, "sha256": digest}

    def verify_files(self, directory: str, names: list[str], checksum: bool = True) -> list[str]:
        """Problems with ``names`` in ``directory`` (missing, wrong size, wrong checksum); empty when all good."""
        problems: list[str] = []
        for name in names:
            path = os.path.join(directory, name)
            expected = self.files.get(name)
            if expected is None:
                problems.append(f"{name}: not listed in the manifest")
            elif not os.path.isfile(path):
                problems.append(f"{name}: missing")
            elif os.path.getsize(path) != expected["size"]:
                problems.append(f"{name}: {os.path.getsize(path)} bytes, the manifest says {expected['size']}")
            elif checksum and file_digest(path)[1] != expected["sha256"]:
                problems.append(f"{name}: SHA-256 differs from the manifest (the file was changed or corrupted)")
        return problems


def write_manifest(directory: str, manifest: Manifest) -> None:
    """Write ``manifest.json`` into ``directory`` durably."""
    write_bytes(os.path.join(directory, MANIFEST_NAME), manifest.to_json().encode())


def read_manifest(directory: str) -> Manifest:
    """Read and check the manifest of the checkpoint in ``directory``.

    Raises:
        CheckpointError: the directory does not exist, has no manifest (a partial save, or not a notebook-accel
            checkpoint), the manifest is corrupt, incomplete, or from a newer format version.
    """
    if not os.path.isdir(directory):
        raise CheckpointError(f"no checkpoint directory at {directory!r}; check the path (save_state returns it).")
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise CheckpointError(
            f"{directory!r} has no {MANIFEST_NAME}: it is a partial save (interrupted before it completed) or not "
            "a notebook-accel checkpoint. Load an earlier checkpoint."
        )
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CheckpointError(f"could not read {path!r}: {e}") from e
    manifest = Manifest.from_json(text, path)
    if manifest.format_version > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory!r} has checkpoint format {manifest.format_version}; this notebook-accel reads up to "
            f"{FORMAT_VERSION}. Upgrade notebook-accel to load it."
        )
    if not manifest.complete:
        raise CheckpointError(f"{directory!r} is marked incomplete in its manifest; load an earlier checkpoint.")
    return manifest
