"""Running the launcher as a child process: in its own session so a timeout or Ctrl-C can stop every worker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["run_child"]

_GRACE_S = 5.0


def _stop_group(proc: subprocess.Popen[str]) -> str:
    """TERM the child's process group, wait a little, then KILL it; reap the child and return its captured output."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            out, _ = proc.communicate(timeout=_GRACE_S)  # retrying communicate loses no output
            return out or ""
        except subprocess.TimeoutExpired:
            continue
    out, _ = proc.communicate()
    return out or ""


def run_child(
    command: Sequence[str], env: Mapping[str, str], timeout: float | None = None, capture: bool = False
) -> tuple[int, str]:
    """Run ``command`` and wait for it; on timeout or KeyboardInterrupt stop its whole process group.

    Returns:
        The exit code (124 after a timeout) and the captured stdout+stderr (empty unless ``capture``).

    Raises:
        KeyboardInterrupt: after the workers were stopped.
    """
    proc = subprocess.Popen(
        list(command),
        env=dict(env),
        start_new_session=True,  # the workers form one group we can signal together
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        return 124, _stop_group(proc)
    except KeyboardInterrupt:
        _stop_group(proc)
        raise
