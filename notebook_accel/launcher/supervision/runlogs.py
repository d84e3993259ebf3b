"""The folder of a run: one file per local rank with its whole output (``runs/<date>-<time>-<function>/``).

The dashboard's pane keeps a bounded tail and the console shows what it is asked to; the files keep everything,
so the rest of a long output stays reachable. The root is ``$NOTEBOOK_ACCEL_LOG_DIR`` or ``runs`` in the working
directory (``runs/`` is what TensorBoard uses too, and is commonly git-ignored); ``NOTEBOOK_ACCEL_LOG_DIR=off``
keeps no files. Only the newest :data:`KEEP_RUNS` run folders of ours are kept under the root; older ones (and
only folders that hold nothing but ``rank<N>.log`` files) are removed when a new run starts.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import warnings
from pathlib import Path

from notebook_accel import environment

__all__ = ["create_run_folder", "rank_log", "display_path", "prune_runs", "prune_runs_aside", "KEEP_RUNS"]

KEEP_RUNS = 50
_OURS = re.compile(r"^\d{8}-\d{6}-[\w.-]+$")
_RANK_LOG = re.compile(r"^rank\d+\.log$")


def rank_log(folder: Path, rank: int) -> Path:
    """The file of ``rank`` in a run folder."""
    return folder / f"rank{rank}.log"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter to read), else absolute.

    A relative path without ``..`` (the default root, ``runs``) already is that, and is shown as it is: resolving it
    would cost a launch a system call per component before its workers start."""
    if not path.is_absolute() and ".." not in path.parts:
        return str(path)
    absolute = path.resolve()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def create_run_folder(function_name: str, keep: int = KEEP_RUNS, prune: bool = True) -> Path | None:
    """Make a new, empty run folder and prune old ones; ``None`` when disabled or impossible (a warning says why).

    Args:
        function_name: the launched function's name, part of the folder's name.
        keep: run folders of ours kept under the root, this one included.
        prune: remove the old ones now; ``False``: the caller calls :func:`prune_runs` later (the launcher does
            it once the workers are forked, off the launch's critical path).

    Example:
        >>> create_run_folder("train")  # doctest: +SKIP
        PosixPath('runs/20261124-101500-train')
    """
    root_setting = environment.log_root()
    if root_setting is None:
        return None
    root = Path(root_setting).expanduser()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^\w.-]+", "_", function_name).strip("._")[:60] or "run"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            folder = root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
            try:
                folder.mkdir()
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{root}/{stamp}-{name}-*")
    except OSError as e:
        warnings.warn(
            f"notebook-accel: cannot create a run folder under {root} ({e}); the workers' output is not kept to "
            f"files. Set {environment.LOG_DIR} to a writable folder, or to 'off'.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if prune:
        prune_runs(folder, keep)
    return folder


def prune_runs(current: Path | None, keep: int = KEEP_RUNS) -> None:
    """Remove our oldest run folders beside ``current`` beyond ``keep`` (``None``: nothing to do)."""
    if current is not None:
        _prune(current.parent, keep, current)


def prune_runs_aside(current: Path | None, keep: int = KEEP_RUNS) -> threading.Thread | None:
    """:func:`prune_runs` in a daemon thread (``None``: nothing to do), so that a launch never waits for the disk: a
    folder's removal is a few system calls per file, milliseconds on a slow disk. The caller joins the thread
    before the run's end."""
    if current is None:
        return None
    thread = threading.Thread(target=prune_runs, args=(current, keep), name="notebook-accel prune runs", daemon=True)
    thread.start()
    return thread


def _prune(root: Path, keep: int, current: Path) -> None:
    """Remove our oldest run folders beyond ``keep`` (never ``current``, never a folder holding other files)."""
    try:  # the name first, then the type the directory listing already gave (no stat per entry); names sorted as
        # strings, a Path made only for a folder to remove (sorting ~50 Paths cost the kernel ~4 ms a launch)
        with os.scandir(root) as entries:
            ours = sorted(e.name for e in entries if _OURS.match(e.name) and e.is_dir() and e.name != current.name)
    except OSError:
        return
    for old in (root / name for name in ours[: max(0, len(ours) - (keep - 1))]):
        try:
            if all(_RANK_LOG.match(f.name) and f.is_file() for f in old.iterdir()):
                shutil.rmtree(old)
        except OSError:
            continue  # in use or not ours to remove: left alone
