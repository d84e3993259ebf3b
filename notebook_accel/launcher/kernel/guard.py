"""Ending the workers' process groups when the kernel itself is killed.

Each worker dies with the kernel (``PR_SET_PDEATHSIG``), but what a worker started (a ``subprocess.Popen``, a
helper process) is not its child in the kernel's sense and would live on, orphaned, after a SIGKILLed or
crashed kernel: nobody is left to end its process group. A tiny guard process (a POSIX shell script), started fresh
(not forked, so it holds none of the kernel's memory) in a session of its own (the stop button, which signals the
kernel's process group, does not reach it), is told the workers' group ids over a pipe. When that pipe reaches end of
file without the guard having been stopped, the kernel is gone: the guard sends SIGKILL to every group and
exits, after removing the run's private store folder (see :mod:`notebook_accel.launcher.rendezvous.store`), if it was
told one. When the run ends normally the launcher kills the guard first and then closes the pipe.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable

__all__ = ["KernelDeathGuard"]

_SH = "/bin/sh"
_STORE_FOLDER = "notebook-accel-store-"  # the only folders the guard removes (see .rendezvous.new_store_folder)
# POSIX sh, not Python: the guard starts while the workers are forked, and an interpreter's start costs ~16 ms of CPU
# (against ~1 ms for sh) taken from them on a small machine. Lines: a process group id, or "rm <folder>".
_GUARD = f"""set -f
trap '' INT TERM
pgids=''
paths=''
while IFS= read -r line; do
  case $line in
    'rm '*) paths="$paths
${{line#rm }}" ;;
    ''|*[!0-9]*) ;;
    *) pgids="$pgids $line" ;;
  esac
done
for pgid in $pgids; do kill -s KILL -- "-$pgid" 2>/dev/null; done
IFS='
'
for path in $paths; do
  case ${{path##*/}} in {_STORE_FOLDER}*) rm -rf -- "$path" ;; esac
done
"""


class KernelDeathGuard:
    """The guard process of one run; :meth:`watch` the workers' groups once they exist, :meth:`close` at the end.

    Start it before forking the workers and have each worker close :attr:`fd` (its copy of the pipe's write
    end) at once, so that only the kernel holds it.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen(
                [_SH, "-c", _GUARD], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except (OSError, ValueError):  # no shell to start: the run goes on unguarded (each worker still dies with us)
            self._proc = None

    @property
    def fd(self) -> int:
        """The write end of the guard's pipe (``-1`` once closed)."""
        proc = self._proc
        return -1 if proc is None or proc.stdin is None else proc.stdin.fileno()

    def watch(self, pgids: Iterable[int]) -> None:
        """Tell the guard the process groups to end if the kernel dies."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            os.write(proc.stdin.fileno(), "".join(f"{pgid}\n" for pgid in pgids if pgid > 0).encode())
        except OSError:  # the guard is gone (killed by someone): the run goes on without it
            pass

    def remove_on_death(self, folder: str) -> None:
        """Have the guard also remove ``folder`` (the run's private store folder, named ``notebook-accel-store-*``;
        no other folder is removed) if the kernel dies."""
        proc = self._proc
        if proc is None or proc.stdin is None or "\n" in folder:
            return
        try:
            os.write(proc.stdin.fileno(), f"rm {folder}\n".encode())
        except OSError:  # the guard is gone: the folder stays behind a killed kernel, in the temporary directory
            pass

    def close(self) -> None:
        """Stop the guard (the run is over: nothing to end) and reap it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()  # before closing the pipe: end of file must never reach a live guard
        proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
