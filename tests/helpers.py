"""Small helpers for tests: free ports, child processes, open file descriptors."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0 and read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_pids(pid: int | None = None) -> list[int]:
    """Process ids whose parent is ``pid`` (default: this process), read from /proc; zombies included."""
    parent = os.getpid() if pid is None else pid
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            out.append(int(entry))
    return out


def open_fds() -> int:
    """Number of file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))
