"""DeepSpeed's just-in-time ops: a stale build lock fails the launch at once with the file and the fix; a build in
progress shows as a phase on the dashboard and the console; ``notebook-accel env --build-deepspeed-ops``."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notebook_accel import channel, notebook_launcher
from notebook_accel.events import Phase, RunInfo
from notebook_accel.launcher import WorkerError
from tests.engines.deepspeed import jit_workers, needs_deepspeed
from tests.launcher.recording import RecordingSink

from notebook_accel.engines.deepspeed import build_notice, jit_ops  # noqa: E402 - imports no deepspeed
REPO = Path(__file__).resolve().parents[3]


def _op(tmp_path: Path) -> object:
    return jit_ops.JitOp("deepspeed_shm_comm", "CPU communication op", tmp_path / "deepspeed_shm_comm", None)


def test_no_lock_means_no_build_in_progress(tmp_path: Path) -> None:
    assert jit_ops.check_lock(_op(tmp_path)) == []


def test_a_lock_a_live_build_holds_is_waited_for(tmp_path: Path) -> None:
    op = _op(tmp_path)
    holder = jit_workers.hold_lock(op.lock)
    try:
        assert jit_ops.check_lock(op) == [holder.pid]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]


def test_a_lock_left_by_a_killed_build_is_refused_with_the_file_and_the_fix(tmp_path: Path) -> None:
    op = _op(tmp_path)
    jit_workers.stale_lock(op.lock)
    with pytest.raises(jit_ops.StaleBuildLockError) as caught:
        jit_ops.check_lock(op)
    message = str(caught.value)
    assert str(op.lock) in message and f"rm {op.lock}" in message and "--build-deepspeed-ops" in message


def test_a_stale_lock_beside_a_built_op_is_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = _op(tmp_path)
    jit_workers.stale_lock(op.lock)
    (op.build_dir / "deepspeed_shm_comm.so").write_bytes(b"")  # built: torch still takes the lock to load it
    monkeypatch.setattr(jit_ops, "cpu_jit_ops", lambda: [op])
    with pytest.raises(jit_ops.StaleBuildLockError):
        with jit_ops.compiling_phase(0):
            pass


def test_the_build_folder_follows_torch_extensions_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert jit_ops._build_dir("deepspeed_shm_comm") == tmp_path / "deepspeed_shm_comm"
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    default = jit_ops._build_dir("deepspeed_shm_comm")
    assert default.name == "deepspeed_shm_comm" and default.parent.name.startswith(f"py{sys.version_info.major}")


class _Writer:
    def __init__(self) -> None:
        self.events: list[object] = []

    def send(self, event: object) -> None:
        self.events.append(event)


def test_the_phase_is_announced_while_an_op_builds_and_cleared_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    op = _op(tmp_path)
    monkeypatch.setattr(jit_ops, "cpu_jit_ops", lambda: [op])
    writer = _Writer()
    previous = channel.uninstall()
    channel.install(writer)  # type: ignore[arg-type]
    try:
        with jit_ops.compiling_phase(0):
            assert [e.text for e in writer.events] == [  # type: ignore[attr-defined]
                "DeepSpeed is compiling its CPU communication op (first run only, about 1-6 min)"]
        (op.build_dir).mkdir()
        (op.build_dir / "deepspeed_shm_comm.so").write_bytes(b"")
        with jit_ops.compiling_phase(0):  # built: nothing to say
            pass
    finally:
        channel.uninstall()
        if previous is not None:
            channel.install(previous)
    assert [e.text for e in writer.events][1:] == [""]  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert err.startswith("notebook-accel: DeepSpeed is compiling its CPU communication op (first run only, about")
    assert f"deepspeed_shm_comm in {op.build_dir}" in err and "--build-deepspeed-ops" in err


def test_an_op_nobody_expected_is_announced_when_its_build_starts_and_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(jit_ops, "cpu_jit_ops", lambda: [])  # e.g. cpu_adam, built for an offloaded optimizer
    monkeypatch.setattr(build_notice, "_POLL_SECONDS", 0.05)
    writer = _Writer()
    previous = channel.uninstall()
    channel.install(writer)  # type: ignore[arg-type]
    try:
        with jit_ops.compiling_phase(0):
            holder = jit_workers.hold_lock_until_told(tmp_path / "cpu_adam" / "lock")
            deadline = time.monotonic() + 60  # a hang guard: the watch looks every 0.05 s
            while not writer.events and time.monotonic() < deadline:
                time.sleep(0.05)
            jit_workers.release(holder)
    finally:
        channel.uninstall()
        if previous is not None:
            channel.install(previous)
    texts = [e.text for e in writer.events]  # type: ignore[attr-defined]
    assert texts[0].startswith(f"another process (pid {holder.pid}, python -c ") and \
        " is compiling DeepSpeed's cpu_adam op (first run only, " in texts[0] and texts[0].endswith("rank 0 waits for it")
    assert texts[-1] == ""
    err = capsys.readouterr().err
    assert f"another process (pid {holder.pid}, " in err and "finished compiling DeepSpeed's cpu_adam op (cpu_adam) in " in err


def test_the_dashboard_shows_the_phase_instead_of_no_progress_yet() -> None:
    from notebook_accel.widgets.run_model import RunState
    from notebook_accel.widgets.views import progress_text, ranks_html

    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
    state.apply(Phase(0, "DeepSpeed is compiling its CPU communication op", 1.0))
    state.apply(Phase(1, "DeepSpeed is waiting for process 12 to finish compiling", 1.0))
    assert progress_text(state)[1] == "DeepSpeed is compiling its CPU communication op"
    assert "waiting for process 12" in ranks_html(state)
    state.apply(Phase(0, "", 2.0))
    assert progress_text(state)[1].startswith("no progress yet")


@pytest.mark.timeout(120)
def test_a_live_build_in_the_workers_reaches_the_sink_as_a_phase(tmp_path: Path) -> None:
    sink = RecordingSink()
    assert notebook_launcher(jit_workers.fake_build, (str(tmp_path), 1.0), num_processes=2, dashboard=sink,
                             use_cpu=True) == ["built"]
    phases = [(e.rank, e.text) for e in sink.of_type(Phase)]
    for rank in (0, 1):
        texts = [text for r, text in phases if r == rank]
        assert len(texts) == 2 and texts[0].startswith("DeepSpeed is compiling its CPU communication op") \
            and texts[1] == ""
    assert any("notebook-accel: DeepSpeed is compiling" in line for line in sink.lines(0, "stderr") + sink.lines(0))


def test_the_cli_build_names_the_process_it_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = _op(tmp_path)
    holder = jit_workers.hold_lock_until_told(op.lock)

    class _Builder:
        def load(self) -> None:  # torch waits for the holder's build, then loads what it built
            jit_workers.release(holder)

    monkeypatch.setattr(jit_ops, "cpu_jit_ops", lambda: [jit_ops.JitOp(op.name, op.what, op.build_dir, _Builder())])
    out = io.StringIO()
    assert jit_ops.build_ops(out) == 1
    assert f"another process (pid {holder.pid}, python -c " in out.getvalue()
    assert "is compiling it now: waiting for it" in out.getvalue()


@pytest.mark.timeout(120)
def test_a_rank_waiting_for_another_ranks_build_names_that_rank_and_hears_when_it_ends(tmp_path: Path) -> None:
    sink = RecordingSink()
    assert notebook_launcher(jit_workers.rank1_builds, (str(tmp_path / "fake_op"), 3.0), num_processes=2,
                             dashboard=sink, use_cpu=True) == ["built"]
    phases = {rank: [e.text for e in sink.of_type(Phase) if e.rank == rank] for rank in (0, 1)}
    waiting = [t for t in phases[0] if t.startswith("rank 1 is compiling")]
    assert waiting, phases
    assert all(t.startswith("rank 1 is compiling DeepSpeed's CPU communication op (first run only, ")
               and t.endswith("; rank 0 waits for it") for t in waiting)
    assert not any("process" in t for t in phases[0]), phases[0]  # a rank of this run, not a pid
    building = [t for t in phases[1] if t.startswith("rank 1 is compiling")]
    assert building and not any("waits" in t for t in building), phases[1]
    assert phases[0][-1] == "" and phases[1][-1] == ""
    lines = sink.lines(0, "stderr") + sink.lines(0)
    assert any("rank 1 finished compiling DeepSpeed's CPU communication op (fake_op) in " in line
               for line in lines), lines


@needs_deepspeed
@pytest.mark.timeout(240)
def test_a_launch_with_a_stale_lock_fails_at_once_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    jit_workers.stale_lock(lock)
    start = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(jit_workers.train_zero2, num_processes=2, use_cpu=True, dashboard=False)
    message = str(caught.value)
    assert "StaleBuildLockError" in message and f"rm {lock}" in message
    assert time.monotonic() - start < 200  # a hang guard: it used to wait forever (seconds when not loaded)


@needs_deepspeed
@pytest.mark.timeout(1500)  # 580 s on a loaded 2-core machine (rebuild and warm launch)
def test_a_real_rebuild_beside_a_built_library_is_announced_and_the_warm_start_after_it_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # slow: DeepSpeed really compiles its comm op (1-6 min); the library is copied from the usual cache when
    # there is one there, and one object file removed, so that ninja rebuilds beside a present library
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    cached = jit_ops._build_dir("deepspeed_shm_comm")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    folder = tmp_path / "deepspeed_shm_comm"
    rebuild = (cached / "deepspeed_shm_comm.so").exists()
    if rebuild:
        shutil.copytree(cached, folder, ignore=shutil.ignore_patterns("lock"))
        (folder / "shm.o").unlink(missing_ok=True)
    first = RecordingSink()
    notebook_launcher(jit_workers.train_zero2, num_processes=2, use_cpu=True, dashboard=first)
    texts = [e.text for e in first.of_type(Phase) if e.rank == 0]
    kind = "a rebuild" if rebuild else "first run only"
    named = [t for t in texts if f"is compiling DeepSpeed's CPU communication op ({kind}, " in t]
    assert named and all(t.startswith(("rank 0 is", "rank 1 is")) for t in named), texts
    assert texts[-1] == ""
    lines = first.lines(0, "stderr") + first.lines(0)
    assert any("finished compiling DeepSpeed's CPU communication op (deepspeed_shm_comm) in " in line
               for line in lines), lines
    warm = RecordingSink()
    notebook_launcher(jit_workers.train_zero2, num_processes=2, use_cpu=True, dashboard=warm)
    assert warm.of_type(Phase) == []  # the library is there and up to date: nothing to say


@needs_deepspeed
@pytest.mark.timeout(120)
def test_the_cli_refuses_a_stale_lock_before_building(tmp_path: Path) -> None:
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    jit_workers.stale_lock(lock)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "notebook_accel.cli", "env", "--build-deepspeed-ops"],
                            capture_output=True, text=True, env=env, timeout=100)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"rm {lock}" in result.stderr and "StaleBuildLockError" in result.stderr


@needs_deepspeed
def test_a_deepspeed_without_the_expected_internals_announces_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    saved = dict(os.environ)
    try:
        import deepspeed.ops

        monkeypatch.setattr(deepspeed.ops, "__compatible_ops__", None, raising=False)  # no .get: not what we know
        assert jit_ops.cpu_jit_ops() == []
    finally:  # importing deepspeed sets variables of its own in this process
        os.environ.clear()
        os.environ.update(saved)
