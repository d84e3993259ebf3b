"""Small helpers for tests: free ports, child processes, open file descriptors, fuzzed calls."""

from __future__ import annotations

import os
import random
import signal
import socket
from dataclasses import dataclass
from typing import Any


def import_accelerate() -> Any:
    """Hugging Face accelerate (the test extra has it), or skip the test with the reason.

    accelerate imports deepspeed (when it is installed) as its Accelerator is made, and deepspeed's import sets
    ``PYTORCH_NVML_BASED_CUDA_CHECK``: deepspeed is imported here first and the environment put back, so the leak
    check sees only what the test itself changed.
    """
    import importlib
    import importlib.util

    import pytest

    saved = dict(os.environ)
    try:
        if importlib.util.find_spec("deepspeed") is not None:
            importlib.import_module("deepspeed")
        return pytest.importorskip("accelerate", reason="accelerate is not installed (the test extra has it)")
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        os.environ.update(saved)


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie or a missing one is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


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


_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


@dataclass(frozen=True)
class ProcessState:
    """What a call must leave as it found it: child processes, open descriptors (by number and target), the
    environment and every signal handler."""

    children: frozenset[int]
    fds: frozenset[tuple[int, str]]
    environ: tuple[tuple[str, str], ...]
    handlers: tuple[tuple[int, Any], ...]

    def leaks(self, after: ProcessState, run_going: bool = False) -> list[str]:
        """What differs in ``after`` (empty when nothing leaked). ``run_going``: a run is being watched meanwhile, so
        its system sampler's reads of ``/proc`` and ``/sys/fs/cgroup`` (a ``/proc/<pid>/stat`` file, ``/proc``
        itself while it is listed) come and go as it samples; they are closed with the run, which the caller checks
        once it ended."""
        problems = []
        if after.children != self.children:
            problems.append(f"child processes {sorted(after.children - self.children)} left running")
        mine, theirs = (_without_samples(self.fds), _without_samples(after.fds)) if run_going else (self.fds, after.fds)
        if theirs != mine:
            problems.append(f"descriptors opened {sorted(theirs - mine)}, closed {sorted(mine - theirs)}")
        if after.environ != self.environ:
            changed = sorted(set(after.environ) ^ set(self.environ))
            problems.append(f"environment changed: {changed}")
        if after.handlers != self.handlers:
            problems.append(f"signal handlers changed: {sorted(set(after.handlers) - set(self.handlers), key=str)}")
        return problems


def _without_samples(fds: frozenset[tuple[int, str]]) -> frozenset[tuple[int, str]]:
    """``fds`` less the system sampler's passing reads: a file such as ``/proc/<pid>/stat``, ``/proc`` itself while
    psutil lists it to find the workers' children, and the memory cgroup's files under ``/sys/fs/cgroup``."""
    return frozenset((fd, target) for fd, target in fds
                     if not (target == "/proc" or target.startswith(("/proc/", "/sys/fs/cgroup"))))


def _fd_targets() -> frozenset[tuple[int, str]]:
    """This process's open descriptors with what each points at."""
    found = set()
    for entry in os.listdir("/proc/self/fd"):
        try:
            found.add((int(entry), os.readlink(f"/proc/self/fd/{entry}")))
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
    return frozenset(found)


def process_state() -> ProcessState:
    """A snapshot of what a fuzzed call must not leak (see :class:`ProcessState`)."""
    return ProcessState(
        children=frozenset(child_pids()),
        fds=_fd_targets(),
        environ=tuple(sorted((k, v) for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST")),
        handlers=tuple((int(s), signal.getsignal(s)) for s in _SIGNALS),
    )


def fuzz_case(
    rng: random.Random, pools: dict[str, tuple[list[Any], list[Any]]], always: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """One fuzzed call's keyword arguments and the names given a bad value.

    ``pools`` maps each parameter to (values that must work, values that must be refused). Up to two
    parameters get a bad value; the others are left out (their default) or, 40% of the time (always for the
    names in ``always``), get a good one.
    """
    bad = rng.sample(sorted(pools), min(rng.choice([0, 1, 1, 2]), len(pools)))
    case: dict[str, Any] = {}
    for name, (good, wrong) in pools.items():
        if name in bad:
            case[name] = rng.choice(wrong)
        elif name in always or rng.random() < 0.4:
            case[name] = rng.choice(good)
    return case, bad


LONG_TEXT = "x" * 100_000
# What a hostile caller passes anywhere: a very long string, a list where a scalar goes, NaN, a huge negative
# number, a dict, an object of no known type.
HOSTILE: dict[str, Any] = {"long": LONG_TEXT, "list": [1], "nan": float("nan"), "negative": -(10**30),
                           "dict": {"a": 1}, "object": object()}


def add_hostile(pools: dict[str, tuple[list[Any], list[Any]]], accepts: dict[str, tuple[str, ...]]) -> None:
    """Add each :data:`HOSTILE` value to every parameter's refused values in ``pools``, except the kinds
    ``accepts`` names for that parameter (where the value is a valid one)."""
    for name, (_, wrong) in pools.items():
        wrong.extend(value for kind, value in HOSTILE.items() if kind not in accepts.get(name, ()))
