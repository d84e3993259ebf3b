"""The manifest: ``manifest.json``, the list of what a checkpoint holds, written last, checked first.

It records the format version, the world size, every saved object (kind, index, file, type name), and the size
and checksum of every file: XXH3-128 (format 3), or SHA-256 in a checkpoint written before (formats 1 and 2), which
still loads and is still verified with it (:mod:`~notebook_accel.checkpointing.checksum`). Its presence with
``"complete": true`` in a directory whose name is not temporary is the completion marker; :func:`read_manifest`
refuses anything else with a clear :class:`CheckpointError`.
"""

from __future__ import annotations

import json
import os
import string
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast, get_args

from notebook_accel.checkpointing.atomic import file_digest, write_bytes
from notebook_accel.checkpointing.checksum import ALGORITHM, ALGORITHMS, Algorithm
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.verified_reads import Expected, checksum_mismatch

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "Kind", "Entry", "Manifest", "read_manifest", "write_manifest",
           "written_format"]

#: the newest format read: 3 records XXH3-128 checksums (1 and 2, SHA-256: one folder / per-rank folders; from 3
#: on a manifest with ``ranks`` is a save into per-rank folders); 4 is 3 where entries may share files (an FSDP
#: model and its optimizers in one DCP state), and is written only then (:func:`written_format`)
FORMAT_VERSION = 4
_SHARING_FORMAT = 4
MANIFEST_NAME = "manifest.json"

Kind = Literal["model", "optimizer", "scheduler", "dataloader", "scaler", "custom", "rng"]
KINDS: tuple[str, ...] = get_args(Kind)


_MAX_INT = 2**62
_MAX_MANIFEST_BYTES = 16 << 20


def file_name_problem(name: Any, per_rank: bool) -> str | None:
    """Why ``name`` cannot be a file of a checkpoint (``None`` when it can): it must be a plain name inside the
    folder (no path separator, no ``..``, not absolute) and a per-rank pattern may hold only ``{rank}``."""
    if not isinstance(name, str) or not name or len(name) > 255:
        return f"file name {name!r:.60} is not a file name"
    fields = []
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(name) if f is not None]
    except ValueError:
        return f"file name {name!r:.60} has unbalanced braces"
    if any((f, spec, conv) != ("rank", "", None) for f, spec, conv in fields) or (fields and not per_rank):
        return f"file name {name!r:.60} may hold only the placeholder {{rank}}, and only for a per-rank entry"
    plain = name.replace("{rank}", "0")
    if plain in (".", "..") or os.sep in plain or (os.altsep and os.altsep in plain) or os.path.isabs(plain):
        return f"file name {name!r:.60} points outside the checkpoint folder; only plain names are allowed"
    return None


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
        files: file name -> ``{"size": int, "xxh3_128": str}`` for every file of the checkpoint (``"sha256"``
            instead in a checkpoint of format 1 or 2).
        step: the Accelerator's ``step`` counter at save time.
        iteration: the automatic-naming iteration of this checkpoint (``None`` for an explicit ``output_dir``).
        format_version: the format written (:func:`written_format`; older ones are read too).
        complete: the completion marker; always True in a committed checkpoint.
        created: Unix time of the save.
        ranks: the ranks whose per-rank files this folder holds when the ranks saved into different folders
            (:mod:`~notebook_accel.checkpointing.folders`); ``None``: every rank's.
        save_id: with ``ranks``, what the folders of one save share, so a load never mixes two saves.
    """

    world_size: int
    entries: list[Entry]
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    step: int = 0
    iteration: int | None = None
    format_version: int = FORMAT_VERSION
    complete: bool = True
    created: float = field(default_factory=time.time)
    ranks: list[int] | None = None
    save_id: str | None = None

    def to_json(self) -> str:
        """Serialise to JSON text (a save into one folder leaves ``ranks`` and ``save_id`` out: format 1)."""
        fields = asdict(self)
        if self.ranks is None:
            del fields["ranks"], fields["save_id"]
        return json.dumps(fields, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        """Parse JSON text (from the file ``where``, named in errors)."""
        try:
            raw = json.loads(text)
            entries = [Entry(**e) for e in raw.pop("entries")]
            manifest = cls(entries=entries, **raw)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:  # RecursionError: deep nesting
            raise CheckpointError(f"the manifest {where!r} is corrupt ({type(e).__name__}: {e}); the checkpoint "
                                  "cannot be trusted: load an older one.") from e
        bad = [e.kind for e in manifest.entries if e.kind not in KINDS]
        if bad:
            raise CheckpointError(f"the manifest {where!r} names unknown object kinds {bad}; allowed: {list(KINDS)}")
        problems = manifest.problems()
        if problems:
            raise CheckpointError(f"the manifest {where!r} is corrupt: " + "; ".join(problems[:5]) + "; the "
                                  "checkpoint cannot be trusted: load an older one.")
        return manifest

    def problems(self) -> list[str]:
        """Fields of the wrong type or out of range, and file names that would leave the checkpoint folder."""
        out = []

        def whole(name: str, value: Any, low: int, optional: bool = False) -> None:
            if (optional and value is None) or (isinstance(value, int) and not isinstance(value, bool)
                                                and low <= value <= _MAX_INT):
                return
            out.append(f"{name} is {value!r:.40} ({type(value).__name__}), expected a whole number >= {low}")

        whole("world_size", self.world_size, 1)
        whole("step", self.step, 0)
        whole("iteration", self.iteration, 0, optional=True)
        whole("format_version", self.format_version, 1)
        if not isinstance(self.complete, bool):
            out.append(f"complete is {self.complete!r:.40} ({type(self.complete).__name__}), expected true or false")
        world = self.world_size if isinstance(self.world_size, int) else 0
        if self.ranks is not None and not (isinstance(self.ranks, list) and self.ranks and all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world for r in self.ranks)):
            out.append(f"ranks is {self.ranks!r:.40}, expected a list of ranks below world_size")
        if self.ranks is not None and not isinstance(self.save_id, str):
            out.append(f"save_id is {self.save_id!r:.40}, expected text")
        if isinstance(self.created, bool) or not isinstance(self.created, (int, float)):
            out.append(f"created is {self.created!r:.40}, expected a time in seconds")
        for e in self.entries:
            whole(f"entry {e.kind} index", e.index, 0)
            if not isinstance(e.type_name, str) or not isinstance(e.per_rank, bool):
                out.append(f"entry {e.kind} {e.index}: type_name must be text and per_rank true or false")
            for name, per_rank in ((e.file, e.per_rank), *((shared, False) for shared in e.shared_files)):
                problem = file_name_problem(name, per_rank)
                if problem:
                    out.append(f"entry {e.kind} {e.index}: {problem}")
        if not isinstance(self.files, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("size"), int)
                and sum(isinstance(v.get(a), str) for a in ALGORITHMS) == 1 for k, v in self.files.items()):
            out.append(f"files must map each name to {{size: int, <checksum>: str}} with one checksum of {ALGORITHMS}")
        return out

    def entries_of(self, kind: Kind) -> list[Entry]:
        """The entries of one kind, in index order."""
        return sorted((e for e in self.entries if e.kind == kind), key=lambda e: e.index)

    def all_files(self) -> list[str]:
        """Every file the entries name, once (of a per-rank entry: the files of the ranks this folder holds)."""
        if self.ranks is None:
            return list(dict.fromkeys(name for e in self.entries for name in e.files(self.world_size)))
        ranks = self.ranks
        return list(dict.fromkeys(
            name for e in self.entries
            for name in ([e.file.format(rank=r) for r in ranks] if e.per_rank else [e.file]) + list(e.shared_files)))

    def record_files(self, directory: str, known: dict[str, tuple[int, str]] | None = None) -> None:
        """Fill :attr:`files` with the size and XXH3-128 digest of every file: from ``known`` (file name ->
        ``(size, digest)``, computed while the files were written), else read from ``directory``."""
        known = known or {}
        for name in self.all_files():
            size, digest = known.get(name) or file_digest(os.path.join(directory, name))
            self.files[name] = {"size": size, ALGORITHM: digest}

    def expected(self, name: str) -> Expected:
        """File ``name``'s record as a reader checks it: ``(algorithm, digest, size)`` (it is listed)."""
        record = self.files[name]
        algorithm = _algorithm(record)
        return algorithm, str(record[algorithm]), int(record["size"])

    def verify_files(self, directory: str, names: list[str], checksum: bool = True) -> list[str]:
        """Problems with ``names`` in ``directory`` (missing, wrong size, wrong checksum); empty when all good."""
        problems: list[str] = []
        for name in names:
            path = os.path.join(directory, name)
            expected = self.files.get(name)
            if expected is None:
                problems.append(f"{name}: not listed in the manifest")
            elif os.path.islink(path):
                problems.append(f"{name}: a symbolic link (a checkpoint holds its own files, not links)")
            elif not os.path.isfile(path):
                problems.append(f"{name}: missing")
            elif os.path.getsize(path) != expected["size"]:
                problems.append(f"{name}: {os.path.getsize(path)} bytes, the manifest says {expected['size']}")
            elif checksum and file_digest(path, (algorithm := _algorithm(expected)))[1] != expected[algorithm]:
                problems.append(checksum_mismatch(name, algorithm))
        return problems


def written_format(entries: list[Entry]) -> int:
    """The format a manifest of ``entries`` is written in: 4 when two entries share a file (a reader of format 3
    would take each for a file of its own), else 3, which every reader since XXH3-128 loads."""
    names = [name for e in entries for name in {e.file, *e.shared_files}]
    return _SHARING_FORMAT if len(names) != len(set(names)) else 3


def _algorithm(expected: dict[str, Any]) -> Algorithm:
    """The checksum algorithm of a file's manifest record (one of them, :meth:`Manifest.problems` checked)."""
    return cast(Algorithm, next(a for a in ALGORITHMS if a in expected))


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
    if os.path.islink(path):  # like every file of a checkpoint, the manifest is its own, not a link elsewhere
        raise CheckpointError(f"{path!r} is a symbolic link; a checkpoint holds its own files, not links. Copy the "
                              "file it points to in its place, or load an older checkpoint.")
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_MANIFEST_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"could not read {path!r}: {e}") from e
    if len(raw) > _MAX_MANIFEST_BYTES:
        raise CheckpointError(f"the manifest {path!r} is larger than {_MAX_MANIFEST_BYTES} bytes: it is not one of "
                              "ours (a manifest lists a few files); load an older checkpoint.")
    manifest = Manifest.from_json(text, path)
    if manifest.format_version > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory!r} has checkpoint format {manifest.format_version}; this notebook-accel reads up to "
            f"{FORMAT_VERSION}. Upgrade notebook-accel to load it."
        )
    if not manifest.complete:
        raise CheckpointError(f"{directory!r} is marked incomplete in its manifest; load an earlier checkpoint.")
    return manifest
