"""Background runs outlive whoever started or awaited them, and never hold another run's descriptors."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from notebook_accel.launcher import WorkerError, notebook_launcher
from notebook_accel.launcher.kernel import fds as kernel_fds
from notebook_accel.launcher.supervision.background import RunArgumentError
from notebook_accel.launcher.supervision.failures import death_message
from notebook_accel.launcher.rendezvous.ports import check_port_free
from notebook_accel.launcher.placement.processes import oom_kills
from tests.helpers import child_pids
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(180)


def _own_sockets() -> set[str]:
    """The sockets this process holds (``socket:[inode]``)."""
    held = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            held.add(target)
    return held


def sockets_then_serve(pause: float) -> tuple[str, list[str]]:
    """The sockets this worker holds on entry (none of its own yet), then a rendezvous and a pause."""
    held = sorted(_own_sockets())
    import torch.distributed as dist

    dist.init_process_group("gloo")
    time.sleep(pause)
    dist.destroy_process_group()
    return os.environ["MASTER_PORT"], held


def open_targets(pause: float) -> list[str]:
    """What every descriptor of this worker points at, on entry; then a pause."""
    targets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue
    time.sleep(pause)
    return targets


def counting(steps: int, pause: float) -> int:
    for _ in range(steps):
        time.sleep(pause)
    return steps


def test_a_concurrent_runs_worker_holds_none_of_the_first_runs_sockets() -> None:
    before = _own_sockets()  # e.g. a kernel client an earlier test left open in this process: not the launcher's
    first = notebook_launcher(sockets_then_serve, args=(3.0,), num_processes=1, block=False, dashboard=RecordingSink())
    time.sleep(1.5)  # the first run's store is serving and has accepted its worker's connection
    second = notebook_launcher(sockets_then_serve, args=(30.0,), num_processes=1, block=False,
                               dashboard=RecordingSink(), concurrent=True)
    try:
        port, first_held = first.result(timeout=90)
        assert [held for held in first_held if held not in before] == []
        time.sleep(0.5)
        check_port_free(int(port))  # the first run is over: its port is free although the second run goes on
        assert second.status == "running"
    finally:
        second.stop()
    assert child_pids() == []


def test_a_concurrent_runs_worker_holds_none_of_the_first_runs_pipes_or_pidfds() -> None:
    first = notebook_launcher(counting, args=(200, 0.05), num_processes=2, block=False, dashboard=RecordingSink())
    try:
        held = kernel_fds.snapshot().fds  # the first run's pipes, pidfds, guard pipe and stop pipe
        assert len(held) >= 8
        assert not [fd for fd in held if os.get_inheritable(fd)], "a launcher descriptor survives exec"
        first_targets = {os.readlink(f"/proc/self/fd/{fd}") for fd in held}
        second = notebook_launcher(open_targets, args=(0.0,), num_processes=2, block=False,
                                   dashboard=RecordingSink(), concurrent=True)
        inherited = set(second.result(timeout=90)) & first_targets
        assert not inherited, f"the second run's worker holds the first run's {sorted(inherited)}"
    finally:
        first.stop()


def _launch(steps: int) -> object:
    return notebook_launcher(counting, args=(steps, 0.1), num_processes=2, block=False, dashboard=RecordingSink())


def test_a_run_started_from_a_thread_that_ends_goes_on() -> None:
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(_launch, 20).result()
    # the pool's thread has ended: the workers must not die with it
    assert run.result(timeout=90) == 20  # type: ignore[attr-defined]
    assert child_pids() == []


def test_a_run_started_with_asyncio_to_thread_goes_on() -> None:
    async def main() -> object:
        return await asyncio.to_thread(_launch, 15)

    run = asyncio.run(main())  # the loop's default executor (and its threads) are shut down
    assert run.result(timeout=90) == 15  # type: ignore[attr-defined]


def test_a_timed_out_await_leaves_the_run_running_and_stoppable() -> None:
    run = notebook_launcher(counting, args=(10_000, 0.05), num_processes=2, block=False, dashboard=RecordingSink())

    async def impatient() -> None:
        await asyncio.wait_for(run, 0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(impatient())
    assert run.status == "running" and not run.done
    assert len(child_pids()) >= 2  # the workers (and the run's guard) still run
    run.stop()  # a hang here is the bug (the pytest timeout guards it)
    assert run.status == "stopped" and child_pids() == []


def test_a_cancelled_await_does_not_cancel_the_run() -> None:
    run = notebook_launcher(counting, args=(10, 0.1), num_processes=2, block=False, dashboard=RecordingSink())

    async def cancel_then_await() -> int:
        task = asyncio.ensure_future(asyncio.wait_for(run, 60))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await run  # type: ignore[no-any-return]

    assert asyncio.run(cancel_then_await()) == 10
    assert run.status == "finished"


def killed_by_another_process() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_sigkill_is_blamed_on_the_oom_killer_only_on_evidence() -> None:
    with pytest.raises(WorkerError) as info:
        notebook_launcher(killed_by_another_process, num_processes=2, dashboard=RecordingSink())
    if oom_kills() is not None:
        assert "not by the out-of-memory killer" in str(info.value)
    assert "killed a process during the run" in death_message(-9, "SIGKILL", 3, 4)
    assert "out-of-memory" not in death_message(-9, "SIGKILL", None, None)
    assert "out-of-memory" not in death_message(-15, "SIGTERM", 3, 4)


def test_oom_kills_reads_the_counter(tmp_path: Path) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 12\noom_kill 7\n")
    assert oom_kills(str(vmstat)) == 7
    vmstat.write_text("nr_free_pages 12\n")
    assert oom_kills(str(vmstat)) is None
    assert oom_kills(str(tmp_path / "absent")) is None


def test_the_handle_refuses_timeouts_it_cannot_use() -> None:
    run = notebook_launcher(counting, args=(10_000, 0.05), num_processes=2, block=False, dashboard=RecordingSink())
    try:
        for bad in (math.nan, "5", [1], True, object()):
            for method in (run.wait, run.result):
                with pytest.raises(RunArgumentError, match=r"timeout=.* is not allowed; pass a number of seconds"):
                    method(timeout=bad)  # type: ignore[operator]
        assert run.wait(-1) is False and run.wait(0.0) is False
        with pytest.raises(TimeoutError, match="it goes on"):
            run.result(timeout=-5)
        assert run.status == "running"
    finally:
        run.stop()
    assert run.wait(10**5000) is True  # more than a wait can take: no limit (and it has ended)
