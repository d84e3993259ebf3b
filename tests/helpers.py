"""Small helpers for tests: free ports, child processes, open file descriptors, fuzzed calls."""

from __future__ import annotations

import os
import random
import socket
from typing import Any


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


def fuzz_case(
    rng: random.Random, pools: dict[str, tuple[list[Any], list[Any]]], always: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """One fuzzed call's keyword arguments and the names given a bad value.

    ``pools`` maps each parameter to (values that must work, values that must be refused). Up to two
    parameters get a bad value; the others are left out (their default) or, 40% of the time (always for the
    names in ``always``), get a good one.
    """
    bad = rng.sample(sorted(pools), rng.choice([0, 1, 1, 2]))
    case: dict[str, Any] = {}
    for name, (good, wrong) in pools.items():
        if name in bad:
            case[name] = rng.choice(wrong)
        elif name in always or rng.random() < 0.4:
            case[name] = rng.choice(good)
    return case, bad
