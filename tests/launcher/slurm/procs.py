"""Finding and ending the processes and network pieces of a test Slurm cluster (stdlib only: the keeper imports it).

A cluster lives in ``/tmp/nas-slurm-<tag>``; its namespace is ``nas<tag>``, its veth ``nash<tag>`` (host side) and
``nasn<tag>`` (namespace side), its subnet ``10.67.<tag>.0/24``. Its daemons (munged, slurmctld, slurmd, and the
slurmstepd every slurmd forks) carry ``NOTEBOOK_ACCEL_TEST_SLURM=<folder>`` in their environment; its clients and
their tasks carry ``SLURM_CONF=<folder>/slurm.conf``. Those two marks, never a command name, pick the processes, so
another cluster (a concurrent test session's, or a real one) is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "nas"
DIR_PREFIX = "/tmp/nas-slurm-"
MARK = "NOTEBOOK_ACCEL_TEST_SLURM"
OWNER_FILE = "owner"
DAEMONS = frozenset({"munged", "slurmctld", "slurmd", "slurmstepd"})


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it: its id, parent, name, command line, environment and network namespace."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    environ: dict[str, str]
    netns: int


def names(tag: int) -> tuple[str, str, str]:
    """The namespace, host-side link and namespace-side link of cluster ``tag``."""
    return f"{PREFIX}{tag}", f"{PREFIX}h{tag}", f"{PREFIX}n{tag}"


def read_proc(pid: int) -> Proc | None:
    """What /proc says of ``pid``; None when it is gone or a zombie (whose environment reads empty)."""
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        with open(f"{base}/environ", "rb") as f:
            raw_env = f.read()
        with open(f"{base}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        netns = os.stat(f"{base}/ns/net").st_ino
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] == "Z":
        return None
    environ = {}
    for item in raw_env.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            environ[key] = value
    comm = stat[stat.find("(") + 1:stat.rfind(")")]
    return Proc(pid, int(fields[1]), comm, cmdline, environ, netns)


def all_procs() -> list[Proc]:
    """Every live process this user can read."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = read_proc(int(entry))
            if proc is not None:
                found.append(proc)
    return found


def belongs(proc: Proc, folder: str) -> bool:
    """Whether ``proc`` is one of the cluster's in ``folder``: a daemon of it, or a client or task using it."""
    return proc.environ.get(MARK) == folder or proc.environ.get("SLURM_CONF") == f"{folder}/slurm.conf"


def _ancestors() -> set[int]:
    """This process and its ancestors (never ended, even when a test put SLURM_CONF in their environment)."""
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        proc = read_proc(pid)
        if proc is None:
            break
        pid = proc.ppid
    return out


def cluster_procs(folder: str) -> list[Proc]:
    """The live processes of the cluster in ``folder``, less this process and its ancestors."""
    spared = _ancestors()
    return [p for p in all_procs() if p.pid not in spared and belongs(p, folder)]


def kill(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def end_processes(folder: str, timeout: float = 20.0) -> list[Proc]:
    """SIGKILL the cluster's processes until none is found three times running; return any still there."""
    quiet, deadline = 0, time.monotonic() + timeout
    while quiet < 3 and time.monotonic() < deadline:
        procs = cluster_procs(folder)
        for proc in procs:
            kill(proc.pid)
        quiet = 0 if procs else quiet + 1
        time.sleep(0.05)
    return cluster_procs(folder)


def remove_network(tag: int) -> None:
    """Delete the namespace and the veth of cluster ``tag`` (either may already be gone)."""
    namespace, host_link, _ = names(tag)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
    subprocess.run(["ip", "link", "del", host_link], capture_output=True)


def network_left(tag: int) -> list[str]:
    """The namespace and links of cluster ``tag`` that still exist."""
    namespace, host_link, _ = names(tag)
    left = [namespace] if os.path.exists(f"/run/netns/{namespace}") else []
    return left + ([host_link] if os.path.exists(f"/sys/class/net/{host_link}") else [])


def end_cluster(folder: str, tag: int) -> list[str]:
    """End everything of the cluster: its processes, its network, its folder. Return what could not be removed."""
    left = [f"pid {p.pid} ({p.comm}: {p.cmdline[:80]})" for p in end_processes(folder)]
    remove_network(tag)
    shutil.rmtree(folder, ignore_errors=True)
    return left + network_left(tag) + ([folder] if os.path.exists(folder) else [])


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (tells a live owner from a reused id); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[19])


def owner_alive(folder: Path) -> bool:
    """Whether the test process that claimed ``folder`` still runs (a folder only just claimed counts as alive)."""
    try:
        pid_text, _, started = (folder / OWNER_FILE).read_text().partition(" ")
    except OSError:
        try:
            return time.time() - folder.stat().st_mtime < 60.0
        except OSError:
            return False
    return start_time(int(pid_text)) == int(started)


def clean_stale() -> list[str]:
    """End the clusters left by test processes that died (folders, namespaces and links with our prefix and no live
    owner). Return what was cleaned, for the log."""
    cleaned = []
    for folder in Path("/tmp").glob(f"{Path(DIR_PREFIX).name}*"):
        tag = folder.name[len(Path(DIR_PREFIX).name):]
        if tag.isdigit() and not owner_alive(folder):
            end_cluster(str(folder), int(tag))
            cleaned.append(str(folder))
    netns_dir = Path("/run/netns")
    leftovers = [p.name for p in netns_dir.iterdir()] if netns_dir.is_dir() else []
    leftovers += [p.name for p in Path("/sys/class/net").iterdir()]
    for name in leftovers:
        match = re.fullmatch(rf"{PREFIX}[hn]?(\d+)", name)
        if match and not Path(f"{DIR_PREFIX}{match.group(1)}").exists():
            remove_network(int(match.group(1)))
            cleaned.append(name)
    return cleaned
