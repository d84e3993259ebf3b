"""Which folder each rank's share of a save goes to, and which rank writes each folder's shared files.

As in accelerate, each rank may pass its own ``output_dir`` (a node-local disk: ``/tmp`` on every machine), and
with ``ProjectConfiguration(save_on_each_node=True)`` every machine keeps its own copy under the same path. The
ranks that save into one folder on one file system form a *group*: the same path, and with
``save_on_each_node`` the same machine too. The group's lowest rank, its *leader*, creates the temporary folder,
writes the files every rank reads (models, optimizers, schedulers, the GradScaler, registered objects) and
commits the folder with a manifest naming the ranks whose own files (RNG, loader positions) it holds. So each
folder holds what its ranks need to resume, and ``load_state`` on each rank reads its own folder.

With one group (every rank the same path, the usual shared file system) nothing changes: rank 0 leads, and the
manifest names no ranks (it holds them all).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

__all__ = ["Folders", "folder_key"]


def folder_key(path: str, each_node: bool) -> tuple[str, str]:
    """What tells this rank's folder apart from another rank's: its path, and with ``each_node`` its machine."""
    return (socket.gethostname() if each_node else "", path)


@dataclass(frozen=True)
class Folders:
    """The folders of one save: every rank's path and the leader of its group, in rank order.

    Example:
        >>> f = Folders.of([("", "/a"), ("", "/b"), ("", "/a")])
        >>> f.leaders, f.ranks_of(2), f.split
        ((0, 1, 0), (0, 2), True)
    """

    paths: tuple[str, ...]
    leaders: tuple[int, ...]

    @classmethod
    def of(cls, keys: list[tuple[str, str]]) -> Folders:
        """The groups of every rank's :func:`folder_key`, in rank order."""
        first: dict[tuple[str, str], int] = {}
        leaders = tuple(first.setdefault(key, rank) for rank, key in enumerate(keys))
        return cls(tuple(path for _, path in keys), leaders)

    @property
    def split(self) -> bool:
        """More than one folder: each holds only its own ranks' per-rank files."""
        return len(set(self.leaders)) > 1

    def ranks_of(self, rank: int) -> tuple[int, ...]:
        """The ranks that save into ``rank``'s folder."""
        return tuple(r for r, leader in enumerate(self.leaders) if leader == self.leaders[rank])

    def two_paths(self) -> str:
        """Two ranks' different paths, for a message."""
        other = next(r for r, leader in enumerate(self.leaders) if leader != self.leaders[0])
        where = " on another machine" if self.paths[other] == self.paths[0] else ""
        return f"rank 0 saves into {self.paths[0]!r}, rank {other} into {self.paths[other]!r}{where}"
