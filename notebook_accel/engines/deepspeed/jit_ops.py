"""DeepSpeed's just-in-time compiled ops: say when one is being compiled, refuse a stale build lock, build ahead.

On a CPU run DeepSpeed compiles its shared-memory communication op (``deepspeed_shm_comm``) the first time a
process group is set up, unless deepspeed was installed with it prebuilt (``DS_BUILD_SHM_COMM=1``). torch builds it
under its extensions folder (``$TORCH_EXTENSIONS_DIR/<op>``, else ``~/.cache/torch_extensions/py311_cpu/<op>``),
guarded by a 0-byte ``lock`` file that the building process creates and holds open until the build ends, and that
every other process waits on until it disappears. A build that is stopped (the stop button, ``timeout=``, a
kernel restart) never removes it, and every later launch then waits forever.

So, before DeepSpeed sets up its group, each worker:

- refuses a lock that no process holds open (checked twice, a moment apart, through ``/proc/*/fd``), whether or not
  the op was built before (torch takes the lock on every load, to see whether to rebuild): the launch fails at once
  with :class:`StaleBuildLockError`, naming the file and how to remove it. A lock some process holds is a build in
  progress (another rank, another run), and is waited for as torch does;
- while DeepSpeed sets up, watches every op's build folder (:mod:`.build_notice` over :mod:`.build_watch`) and
  posts a :class:`~notebook_accel.events.Phase` whenever a build is under way, however it started (a first run, a rebuild
  after changed sources or flags or another ninja, another kernel, the CLI): who compiles it (``rank 1``, or
  another process with its pid and command line), for how long so far, and which rank waits for it; shown by the
  dashboard and the console, with a line on stderr when it starts and when it ends. Ranks are named from the pids
  of this run's workers, gathered once over the process group (gloo; elsewhere a rank knows only itself). A warm
  start (the library there and up to date) says nothing.

:func:`build_ops` compiles the ops ahead of time (``notebook-accel env --build-deepspeed-ops``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from notebook_accel import environment
from notebook_accel.durations import format_duration
from notebook_accel.engines.deepspeed.build_notice import KnownOp, announcing, run_pids
from notebook_accel.engines.deepspeed.build_watch import MINUTES, holder_name, lock_holders
from notebook_accel.errors import NotebookAccelError

__all__ = ["StaleBuildLockError", "JitOp", "cpu_jit_ops", "lock_holders", "check_lock", "run_pids",
           "compiling_phase", "build_ops", "MINUTES"]

_RECHECK_SECONDS = 0.3  # a finished build closes the lock, then removes it: a lock seen twice is not that moment


class StaleBuildLockError(NotebookAccelError, RuntimeError):
    """A DeepSpeed op's build lock was left by a build that was stopped; every launch would wait on it forever."""


@dataclass(frozen=True)
class JitOp:
    """One op DeepSpeed compiles on first use.

    Attributes:
        name: the op's name (``"deepspeed_shm_comm"``), also its build folder's name.
        what: what it is, for people ("CPU communication op").
        build_dir: where torch builds it.
        builder: DeepSpeed's op builder (``builder.load()`` builds and loads it).
    """

    name: str
    what: str
    build_dir: Path
    builder: Any

    @property
    def lock(self) -> Path:
        """torch's build lock for this op."""
        return self.build_dir / "lock"

    @property
    def built(self) -> bool:
        """The compiled library is there (loading it then takes a moment, not minutes)."""
        return (self.build_dir / f"{self.name}.so").exists()


def _build_dir(name: str) -> Path:
    """The folder torch builds extension ``name`` in (the rule of ``torch.utils.cpp_extension``)."""
    root = environment.get("TORCH_EXTENSIONS_DIR")
    if root:
        return Path(root) / name
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if torch.version.hip is not None:
        accelerator = f"rocm{torch.version.hip.replace('.', '')}"
    elif torch.version.cuda is not None:
        accelerator = f"cu{torch.version.cuda.replace('.', '')}"
    else:
        accelerator = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{accelerator}" / name


def cpu_jit_ops() -> list[JitOp]:
    """The ops DeepSpeed will compile when it sets up a process group here: its shared-memory communication op on
    a CPU accelerator, unless deepspeed was installed with it prebuilt or this machine cannot build it. A deepspeed
    whose internals differ from what this expects gives none (DeepSpeed then builds as it would anyway)."""
    try:
        import deepspeed.ops
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops

        builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            return []
        if installed_ops.get(builder.NAME, False):
            return []
        return [JitOp(builder.NAME, "CPU communication op", _build_dir(builder.NAME), builder)]
    except (ImportError, AttributeError, TypeError):
        return []


def check_lock(op: JitOp) -> list[int]:
    """The processes building ``op`` now (empty: no build, no lock).

    Raises:
        StaleBuildLockError: its lock exists and no process holds it open (seen twice, a moment apart).
    """
    for attempt in range(2):
        try:
            before = op.lock.stat().st_ino
        except FileNotFoundError:
            return []
        holders = lock_holders(op.lock)
        if holders is None or holders:
            return holders or []
        if attempt == 0:
            time.sleep(_RECHECK_SECONDS)
        elif _inode(op.lock) == before:
            raise StaleBuildLockError(
                f"DeepSpeed's {op.what} ({op.name}) cannot be built: a stopped build left its lock, and torch "
                f"would wait for it forever. Fix: `rm {op.lock}`, then launch again (about {MINUTES} min to build) "
                "or build it first: `notebook-accel env --build-deepspeed-ops`"
            )
    return []


def _inode(path: Path) -> int | None:
    """The file's inode, ``None`` when it is gone."""
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


@contextmanager
def compiling_phase(rank: int) -> Iterator[None]:
    """Around DeepSpeed's process-group set-up: refuse a stale build lock, and while any op gets built say so (a
    :class:`~notebook_accel.events.Phase` to the dashboard or console naming who builds it, lines on stderr when it
    starts and ends; see :mod:`.build_notice`), clearing it after. Every rank of the run calls it at the same point
    (it gathers the ranks' pids: :func:`~.build_notice.run_pids`).

    Raises:
        StaleBuildLockError: see :func:`check_lock`.
    """
    peers = run_pids(rank)
    ops = cpu_jit_ops()
    for op in ops:
        check_lock(op)  # a built op too: torch takes the lock on every load, even with nothing to build
    root = ops[0].build_dir.parent if ops else _build_dir("_").parent
    with announcing(rank, peers, root, [KnownOp(op.name, op.what, op.build_dir) for op in ops]):
        yield


def build_ops(out: Any = None) -> int:
    """Compile every op DeepSpeed would compile on first use here; returns how many were built.

    Args:
        out: where to write what happens (default ``sys.stdout``).

    Raises:
        StaleBuildLockError: an op's lock was left by a stopped build.
    """
    out = sys.stdout if out is None else out
    ops = cpu_jit_ops()
    if not ops:
        print("DeepSpeed has no op to compile on this machine (prebuilt, or not used here)", file=out)
    for op in ops:
        holders = check_lock(op)
        start = time.monotonic()
        print(f"building DeepSpeed's {op.what} ({op.name}) in {op.build_dir} ...", file=out, flush=True)
        if holders:  # torch waits for that build, then loads what it built
            print(f"{holder_name(holders[0], {})} is compiling it now: waiting for it", file=out, flush=True)
        op.builder.load()
        print(f"built {op.name} in {format_duration(time.monotonic() - start)}", file=out, flush=True)
    return len(ops)
