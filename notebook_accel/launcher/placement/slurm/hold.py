"""The watchdog of an allocation a login node's kernel asked for: ``python -I hold.py <sbatch options>``.

It submits the job that holds the allocation (``sbatch --parsable ...``), tells the kernel its id (one line on its
stdout; sbatch's refusal on its stderr, exit 1), then reads its stdin, a pipe from the kernel, until it ends, and
cancels the job (``scancel``), queued or running. The kernel closes the pipe when the run ends, fails, is stopped or
times out; the kernel's death (SIGKILL included) closes it too, so a killed kernel leaves no job behind. The job is
submitted by the watchdog itself, so there is no moment when a job exists that nobody will cancel. Standard library
only (it runs with ``-I``, apart from the kernel's packages), started in a session of its own (a Ctrl-C in the
kernel's terminal does not reach it); SIGTERM, SIGHUP and SIGINT cancel the job too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

__all__ = ["main"]


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _tell(line: str) -> None:
    """One line to the kernel, which may be gone (then the job is cancelled all the same)."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, OSError):
        pass


def main(options: list[str]) -> int:
    """Submit, tell, wait for the kernel's pipe to end, cancel; the exit code (1: sbatch refused)."""
    stopping = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    for sig in stopping:
        signal.signal(sig, _exit)
    job = ""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, stopping)  # a signal while sbatch runs: once its id is known
        try:
            submitted = subprocess.run(["sbatch", *options], capture_output=True, text=True,
                                       stdin=subprocess.DEVNULL)
            job = submitted.stdout.strip().split(";")[0] if submitted.returncode == 0 else ""
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
        if not job:
            sys.stderr.write(submitted.stderr.strip() or f"sbatch exited with {submitted.returncode}")
            return 1
        _tell(job)
        while os.read(0, 65536):
            pass
        return 0
    finally:
        if job:
            subprocess.run(["scancel", job], capture_output=True, stdin=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
