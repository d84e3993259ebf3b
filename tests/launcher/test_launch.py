"""notebook_launcher end to end: real forked workers, gloo on 127.0.0.1."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from notebook_accel import channel
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import Exited, Failed, Finished, Started
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from notebook_accel.launcher.supervision import supervisor
from notebook_accel.launcher.child import main as worker
from tests.helpers import child_pids, free_port, open_fds
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(60)


def _rank() -> int:
    return int(os.environ["RANK"])


# -- worker bodies (module level, plain asserts) ------------------------------------------------------------
def all_reduce(scale: float) -> tuple[int, float]:
    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank, t.item() * scale


def report_env() -> dict[str, object]:
    env = LaunchEnvironment.from_environ()
    info = {"env": env.to_environ(), "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
            "accelerate_mp": os.environ.get("ACCELERATE_MIXED_PRECISION"), "bare_mp": "MIXED_PRECISION" in os.environ}
    print(json.dumps(info))
    return info


def big_value() -> bytes:
    return b"x" * 50_000_000 if _rank() == 0 else b""


def tensor_value() -> dict[str, torch.Tensor]:
    return {"weights": torch.full((256, 256), float(_rank()) + 1.0), "step": torch.tensor(7)}


def raise_on_rank1() -> None:
    if _rank() == 1:
        raise ValueError("rank one is broken")
    time.sleep(30)


def exit_on_rank1(code: int) -> None:
    if _rank() == 1:
        os._exit(code)
    time.sleep(30)


def kill_rank1() -> None:
    if _rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)


def sleep_forever() -> None:
    time.sleep(60)


def raise_on_both() -> None:
    dist.init_process_group("gloo")
    dist.barrier()
    raise RuntimeError(f"failure on rank {_rank()}")


def return_rank() -> int:
    return _rank()


def write_output() -> None:
    libc = ctypes.CDLL(None)
    libc.printf(b"printf %d\n", 5)  # C stdio, buffered in the pipe case: flushed before os._exit
    logging.getLogger("kernel-made").warning("logged on %d", _rank())
    os.write(1, b"from C level\n")
    os.write(2, b"C stderr\n")
    sys.stdout.write("hel")
    sys.stdout.flush()
    time.sleep(0.05)
    sys.stdout.write("lo\n")
    print("warning on", _rank(), file=sys.stderr)


def unpicklable() -> object:
    return lambda: None


def system_exit(code: int) -> None:
    sys.exit(code)


def own_group_and_channel() -> tuple[bool, int]:
    writer = channel.current()
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return writer is not None and not getattr(writer, "is_parent", False), int(t.item())


def stubborn_then_fail() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL can stop rank 0
    if _rank() == 1:
        raise ValueError("rank one fails")
    time.sleep(30)


def stubborn_sleep() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(30)


def leave_grandchild() -> int:
    import subprocess

    subprocess.Popen(["sleep", "2"])  # inherits fd 1/2: the pipes stay open after this worker exits
    print("done")
    return _rank()


# -- tests --------------------------------------------------------------------------------------------------
def test_two_workers_all_reduce_and_rank0_value_returned() -> None:
    sink = RecordingSink()
    assert notebook_launcher(all_reduce, args=(2.0,), num_processes=2, dashboard=sink) == (0, 6.0)
    assert sink.info is not None and sink.info.devices == ("cpu", "cpu") and sink.info.backend == "gloo"
    assert sorted(e.rank for e in sink.of_type(Started)) == [0, 1]
    assert sorted(e.rank for e in sink.of_type(Finished)) == [0, 1]
    assert all(e.value is None for e in sink.of_type(Finished))  # the value is not copied to the sink
    assert sorted((e.rank, e.exit_code) for e in sink.of_type(Exited)) == [(0, 0), (1, 0)]
    assert sink.outcome is not None and sink.outcome.status == "finished"
    assert child_pids() == []


def test_environment_per_rank_and_launch_choices_reach_workers() -> None:
    sink = RecordingSink()
    port = free_port()
    result = notebook_launcher(
        report_env, num_processes=2, dashboard=sink, use_port=port, mixed_precision="bf16",
        gradient_accumulation_steps=4,
    )
    rank1 = json.loads(sink.lines(1)[0])
    for rank, info in ((0, result), (1, rank1)):
        env = info["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == str(port)
        assert env["NOTEBOOK_ACCEL_DEVICE"] == "cpu"
        assert env["NOTEBOOK_ACCEL_MIXED_PRECISION"] == "bf16"
        # accelerate's name too, in the worker's own environment (accelerate 1.16's notebook_launcher sets it and
        # never a bare MIXED_PRECISION)
        assert info["accelerate_mp"] == "bf16" and info["bare_mp"] is False
        assert env["NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
        assert env["NOTEBOOK_ACCEL_LAUNCHED"] == "1"
        if "OMP_NUM_THREADS" not in os.environ:
            expected = max(1, len(os.sched_getaffinity(0)) // 2)
            assert info["threads"] == expected and info["omp"] == str(expected)


def test_large_return_value_does_not_deadlock() -> None:
    assert len(notebook_launcher(big_value, num_processes=2, dashboard=RecordingSink())) == 50_000_000


def test_tensor_return_value_arrives_by_value() -> None:
    # regression: torch's shared-memory reductions made rank 0's tensor vanish when the worker exited
    value = notebook_launcher(tensor_value, num_processes=2, dashboard=RecordingSink())
    assert torch.equal(value["weights"], torch.ones(256, 256)) and int(value["step"]) == 7


def test_raise_on_rank1_stops_rank0_and_names_rank_and_user_frame() -> None:
    sink = RecordingSink()
    with pytest.raises(WorkerError) as info:
        notebook_launcher(raise_on_rank1, num_processes=2, dashboard=sink)
    error = info.value
    assert error.rank == 1 and len(error.failures) == 1
    assert "rank 1" in str(error) and "ValueError: rank one is broken" in str(error)
    assert "raise_on_rank1" in error.traceback and "test_launch.py" in error.traceback
    assert "notebook_accel" not in error.traceback  # user's frames only
    assert isinstance(error, RuntimeError)
    assert sink.outcome is not None and sink.outcome.status == "failed" and sink.outcome.failed_ranks == (1,)
    assert [e.rank for e in sink.of_type(Failed)] == [1]


def test_os_exit_reports_exit_code() -> None:
    with pytest.raises(WorkerError) as info:
        notebook_launcher(exit_on_rank1, args=(7,), num_processes=2, dashboard=RecordingSink())
    assert info.value.rank == 1 and info.value.exit_code == 7
    assert "exited with code 7" in str(info.value)


def test_sigkill_reports_signal_name() -> None:
    with pytest.raises(WorkerError) as info:
        notebook_launcher(kill_rank1, num_processes=2, dashboard=RecordingSink())
    failure = info.value.failures[0]
    assert failure.rank == 1 and failure.signal_name == "SIGKILL" and failure.exit_code == -9
    assert "SIGKILL" in str(info.value)


def test_timeout_stops_everything() -> None:
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError, match="timeout=0.5"):
        notebook_launcher(sleep_forever, num_processes=2, dashboard=sink, timeout=0.5)
    assert sink.outcome is not None and sink.outcome.status == "timeout"
    assert child_pids() == []


def test_interrupt_stops_workers_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGINT)
    sink = RecordingSink()
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            notebook_launcher(sleep_forever, num_processes=2, dashboard=sink)
    finally:
        timer.cancel()
    assert signal.getsignal(signal.SIGINT) is before
    assert sink.outcome is not None and sink.outcome.status == "interrupted"
    assert child_pids() == []


def test_failures_on_both_ranks_are_reported() -> None:
    with pytest.raises(WorkerError) as info:
        notebook_launcher(raise_on_both, num_processes=2, dashboard=RecordingSink())
    assert sorted(f.rank for f in info.value.failures) == [0, 1]
    assert "2 workers failed" in str(info.value)
    assert all(f.exc_type == "RuntimeError" for f in info.value.failures)


def test_twenty_launches_leak_no_fds_or_processes() -> None:
    notebook_launcher(return_rank, num_processes=2, dashboard=RecordingSink())  # warm up lazy imports
    fds = open_fds()
    for _ in range(20):
        assert notebook_launcher(return_rank, num_processes=2, dashboard=RecordingSink()) == 0
    assert open_fds() <= fds
    assert child_pids() == []


def test_output_captured_in_whole_lines_including_c_level() -> None:
    sink = RecordingSink()
    logger = logging.getLogger("kernel-made")
    handler = logging.StreamHandler(sys.stderr)  # made in the kernel, holding the kernel's stream
    logger.addHandler(handler)
    try:
        notebook_launcher(write_output, num_processes=2, dashboard=sink)
    finally:
        logger.removeHandler(handler)
    for rank in (0, 1):
        stdout = sink.lines(rank, "stdout")
        assert "printf 5" in stdout  # C stdio: its buffering decides when, but it is never lost
        assert [line for line in stdout if line != "printf 5"] == ["from C level", "hello"]
        stderr = sink.lines(rank, "stderr")
        # Python's stderr is in order (one ordered pipe); C's fd 2 has a pipe of its own, whose lines take their
        # place where the launcher reads them (streams.py): under load the 50 ms head start is not always enough
        assert [line for line in stderr if line != "C stderr"] == [f"logged on {rank}", f"warning on {rank}"]
        assert stderr.count("C stderr") == 1, stderr


def test_unpicklable_return_value_is_a_clear_error() -> None:
    with pytest.raises(WorkerError, match="cannot be sent back to the kernel") as info:
        notebook_launcher(unpicklable, num_processes=2, dashboard=RecordingSink())
    assert info.value.rank == 0


def test_sys_exit_zero_is_success_and_nonzero_a_failure() -> None:
    assert notebook_launcher(system_exit, args=(0,), num_processes=2, dashboard=RecordingSink()) is None
    with pytest.raises(WorkerError, match="SystemExit"):
        notebook_launcher(system_exit, args=(3,), num_processes=2, dashboard=RecordingSink())


def test_state_in_the_parent_does_not_break_the_launch(port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    class ParentWriter:
        is_parent = True

    channel.install(ParentWriter())  # type: ignore[arg-type]
    try:
        assert notebook_launcher(own_group_and_channel, num_processes=2, dashboard=RecordingSink()) == (True, 2)
        assert dist.is_initialized()  # the kernel's own group is untouched
    finally:
        channel.uninstall()
        dist.destroy_process_group()
        del store


def test_worker_ignoring_sigterm_is_killed_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "GRACE_SECONDS", 0.5)
    sink = RecordingSink()
    with pytest.raises(WorkerError) as info:
        notebook_launcher(stubborn_then_fail, num_processes=2, dashboard=sink)
    assert [f.rank for f in info.value.failures] == [1]  # rank 0 was stopped by us: not a failure
    assert (0, -9, "SIGKILL") in [(e.rank, e.exit_code, e.signal_name) for e in sink.of_type(Exited)]


def test_interrupt_kills_a_worker_ignoring_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "GRACE_SECONDS", 0.5)
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            notebook_launcher(stubborn_sleep, num_processes=2, dashboard=RecordingSink())
    finally:
        timer.cancel()
    assert child_pids() == []


def test_failure_in_worker_setup_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(threads: int) -> None:
        raise OSError("no threads for you")

    monkeypatch.setattr(worker, "_set_threads", broken)
    sink = RecordingSink()
    with pytest.raises(WorkerError, match="exited with code 70.*set-up") as info:
        notebook_launcher(return_rank, num_processes=2, dashboard=sink)
    assert info.value.exit_code == 70
    assert any("OSError: no threads for you" in line for line in sink.lines(info.value.rank, "stderr"))


def test_grandchild_holding_the_output_open_does_not_stall_the_launch() -> None:
    sink = RecordingSink()
    assert notebook_launcher(leave_grandchild, num_processes=2, dashboard=sink) == 0
    assert sink.lines(0) == ["done"] and sink.lines(1) == ["done"]
