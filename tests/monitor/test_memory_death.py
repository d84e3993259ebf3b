"""A worker killed while its memory cgroup is nearly full: the out-of-memory killer is named with the figures
when it killed the worker, and never when something else sent the SIGKILL. Real 2-process runs whose launcher
(this test process) is moved into a memory cgroup with about 2 GiB of room."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from notebook_accel import WorkerError, notebook_launcher
from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.launcher.placement.processes import oom_kills
from notebook_accel.launcher.supervision.failures import death_message
from notebook_accel.monitor.sampler import MemoryPeaks, memory_death_note
from tests.monitor import workers

ROOM = 2 << 30
GIB = 1 << 30


def _own_group() -> tuple[Path, str, str]:
    """This process's memory cgroup folder, its limit file and its process list (v1 or v2), or a skip."""
    lines = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]
    v1 = next((path for _, controllers, path in lines if "memory" in controllers.split(",")), None)
    if v1 is not None:
        return Path("/sys/fs/cgroup/memory") / v1.lstrip("/"), "memory.limit_in_bytes", "cgroup.procs"
    v2 = next((path for _, controllers, path in lines if controllers == ""), None)
    if v2 is None or not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("no memory cgroup (v1 or v2) here")
    return Path("/sys/fs/cgroup") / v2.lstrip("/"), "memory.max", "cgroup.procs"


@pytest.fixture
def launcher_in_small_cgroup() -> Iterator[Path]:
    """This process (the launcher, and so every worker it forks) in a new memory cgroup with ``ROOM`` bytes, or a
    skip where none can be made; moved back and the cgroup removed afterwards."""
    own, limit_file, procs = _own_group()
    folder = own / f"notebook-accel-room-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / limit_file).write_text(str(ROOM))
        (folder / procs).write_text(str(os.getpid()))
    except OSError as e:
        if folder.exists():
            folder.rmdir()
        pytest.skip(f"cannot make a memory cgroup and move into it here ({e}); needs root and a writable cgroup "
                    "file system (cgroup v2 also needs the memory controller in the parent's subtree_control)")
    try:
        yield folder
    finally:
        (own / procs).write_text(str(os.getpid()))
        for _ in range(100):  # the killed workers' memory is uncharged as they are reaped
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.timeout(180)
def test_a_gradual_leak_killed_by_the_oom_killer_keeps_its_figures(launcher_in_small_cgroup: Path) -> None:
    # the issue: the last sample, taken while the dying rank freed its memory (0 bytes, its cgroup unreadable),
    # replaced the one that showed 1.91 of 2.10 GiB, and the error kept no figure (6 of 6 times)
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(workers.leak_until_killed, (320,), num_processes=2, dashboard=False, timeout=120)
    message = str(caught.value)
    assert "rank 1" in message and "SIGKILL" in message, message
    assert "most likely the out-of-memory killer" in message and "of its 2.00 GiB limit" in message, message


@pytest.mark.timeout(180)
def test_a_plain_sigkill_at_high_memory_is_not_blamed_on_the_oom_killer(launcher_in_small_cgroup: Path) -> None:
    if oom_kills() is None:
        pytest.skip("the out-of-memory killer's count (/proc/vmstat oom_kill) cannot be read here")
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(workers.killed_at_high_memory, (0.88,), num_processes=2, dashboard=False, timeout=120)
    message = str(caught.value)
    assert "rank 1" in message and "killed by SIGKILL" in message, message
    assert "not by the out-of-memory killer" in message and "most likely" not in message, message


def test_the_oom_killer_is_named_on_evidence_and_never_against_it() -> None:
    note = "most likely the out-of-memory killer: 1.91 GiB of its 2.10 GiB limit"
    assert "not by the out-of-memory killer" in death_message(-9, "SIGKILL", 3, 3, note)  # the count did not move
    assert death_message(-9, "SIGKILL", 3, 4, note).endswith(note)
    assert death_message(-9, "SIGKILL", None, None, note).endswith(note)  # no count to read: the figures decide
    assert "killed a process during the run" in death_message(-9, "SIGKILL", 3, 4)
    assert "out-of-memory" not in death_message(-15, "SIGTERM", 3, 4, note)


def _rank1(at: float, rss: int, limit: int | None, group: int | None) -> SystemSample:
    return SystemSample(at, (RankSystem(1, 0.0, rss, rss, memory_limit=limit, memory_group_usage=group),),
                        20 * GIB, 24 * GIB)


def test_the_tightest_recent_sample_is_the_evidence_not_the_dying_one() -> None:
    peaks = MemoryPeaks(window=10.0)
    peaks.add(_rank1(100.0, GIB, 2 * GIB, int(1.91 * GIB)))
    peaks.add(_rank1(101.0, 0, None, None))  # the dying process, freeing its memory, its cgroup unreadable
    kept = peaks.get(1)
    assert kept is not None and kept.time == 100.0
    note = memory_death_note(kept, 1)
    assert note is not None and "1.91 GiB of its 2.00 GiB limit" in note
    peaks.add(_rank1(111.0, GIB // 2, 2 * GIB, GIB))  # the peak is over 10 s old: a looser, newer one replaces it
    assert peaks.get(1) is not None and peaks.get(1).time == 111.0  # type: ignore[union-attr]
