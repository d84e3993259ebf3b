"""``max_restarts`` on the real two-node test Slurm: a failed run restarts as a new ``srun`` step in the same
allocation and says which restart it is; after ``max_restarts`` the usual error lists every attempt; a timeout never
restarts. The ``inside`` fixture checks after each test that no step and no task process is left on either node."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from tests.launcher.recording import RecordingSink
from tests.launcher.slurm.cluster import Allocation

pytestmark = pytest.mark.timeout(300)


def _fails_first(folder: str) -> str:
    """Rank 1 (on n2) fails while ``folder`` holds no marker, leaving one; each rank then says where and which
    attempt it ran (rank 0's line is the run's value)."""
    from notebook_accel import environment

    rank, node = int(environment.get("RANK") or -1), environment.get("SLURMD_NODENAME") or "?"
    attempt = environment.get(environment.RESTART_COUNT) or "0"
    with open(Path(folder) / f"attempt-{attempt}-rank-{rank}", "w") as f:
        f.write(node)
    marker = Path(folder) / "failed-once"
    if rank == 1 and not marker.exists():
        marker.write_text(node)
        raise RuntimeError(f"the first attempt's failure on {node}")
    return f"rank {rank} on {node}, attempt {attempt}"


def _always_fails(folder: str) -> None:
    from notebook_accel import environment

    if environment.get("RANK") == "1":
        raise RuntimeError("this rank always fails")


def _sleep() -> None:
    time.sleep(300)


def test_a_run_that_fails_once_restarts_as_a_new_step_and_returns_rank_0s_value(
        inside: Allocation, tmp_path: Path) -> None:
    sink = RecordingSink()
    value = notebook_launcher(_fails_first, args=(str(tmp_path),), num_processes=2, cluster="slurm",
                              max_restarts=2, dashboard=sink)
    assert value == "rank 0 on n1, attempt 1"
    ran = sorted(p.name for p in tmp_path.glob("attempt-*"))
    assert ran == ["attempt-0-rank-0", "attempt-0-rank-1", "attempt-1-rank-0", "attempt-1-rank-1"]
    assert (tmp_path / "attempt-1-rank-1").read_text() == "n2"  # the restart spans both nodes again
    assert sink.info is not None, "the dashboard was never told the run"
    restart = sink.info.restart  # what the dashboard and the console show of the attempt
    assert restart.startswith("restart 1 of 2 from the start (no checkpoint committed yet) after rank 1"), restart
    assert "the first attempt's failure on n2" in restart


def test_after_max_restarts_the_error_lists_every_attempt(inside: Allocation, tmp_path: Path) -> None:
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(_always_fails, args=(str(tmp_path),), num_processes=2, cluster="slurm", max_restarts=1,
                          dashboard=RecordingSink())
    assert len(caught.value.attempts) == 2, caught.value.attempts
    assert "this rank always fails" in str(caught.value) and "n2" in str(caught.value)


def test_a_timeout_does_not_restart(inside: Allocation) -> None:
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(_sleep, num_processes=2, cluster="slurm", timeout=8, max_restarts=2, dashboard=sink)
    assert sink.info is not None and sink.info.restart == ""
