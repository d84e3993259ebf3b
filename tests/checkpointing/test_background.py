"""``save_state(async_save=True)`` in one process: the snapshot, the bytes, the failure at the next call, pruning after
the commit, the memory fallback, the refusal of an engine that writes from its live state."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, background, save, save_state, serialize
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.saved import Saved
from tests.checkpointing.fakes import fingerprint, make_accelerator, train_step


@pytest.fixture(autouse=True)
def _nothing_left_in_flight():
    yield
    try:
        background.wait_for_checkpoint()
    except CheckpointError:
        pass
    background.release_buffers()


def _files(path: str) -> dict[str, Any]:
    """Every file's bytes; the manifest parsed, without the time it was written."""
    out: dict[str, Any] = {name: Path(path, name).read_bytes() for name in sorted(os.listdir(path))}
    out["manifest.json"] = json.loads(out["manifest.json"])
    del out["manifest.json"]["created"]
    return out


def _held_writer(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make the background writer wait (before its first file) until the returned event is set."""
    release = threading.Event()
    real = save._write_files

    def held(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            assert release.wait(60), "the test never released the writer"
        return real(*args, **kwargs)

    monkeypatch.setattr(save, "_write_files", held)
    return release


def test_the_background_checkpoint_equals_a_blocking_one_bit_for_bit(tmp_path: Path, monkeypatch) -> None:
    acc = make_accelerator(seed=3)
    train_step(acc)
    blocking = save_state(acc, str(tmp_path / "blocking"))
    release = _held_writer(monkeypatch)
    path = background.save_state_in_background(acc, str(tmp_path / "background"))
    assert background.in_flight() == path and not os.path.exists(path)  # returned before anything was written
    train_step(acc)  # the loop goes on and changes every part of the state while the writer waits
    release.set()
    assert background.wait_for_checkpoint() == path
    assert background.in_flight() is None
    assert _files(path) == _files(blocking)  # the snapshot, not the state the loop changed since


def test_a_failed_background_write_is_raised_at_the_next_call_and_keeps_the_previous(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    acc = make_accelerator(project_dir=str(tmp_path))
    first = save_state(acc)
    train_step(acc)
    real = serialize.save_without_crc

    def full(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            return real(obj, f, *args, **kwargs)
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(serialize, "save_without_crc", full)
    second = background.save_state_in_background(acc)
    assert second.endswith("checkpoint_1")
    with pytest.raises(CheckpointError, match=r"background save of checkpoint '.*checkpoint_1' failed: .*No space "
                                              r"left on device.*previous checkpoint is still the latest complete"):
        background.save_state_in_background(acc)  # the next call raises it ...
    assert background.wait_for_checkpoint() is None  # ... once
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [os.path.basename(first)]  # no partial folder either


def test_total_limit_prunes_only_after_the_commit(tmp_path: Path, monkeypatch) -> None:
    acc = make_accelerator(project_dir=str(tmp_path), total_limit=1)
    save_state(acc)
    train_step(acc)
    release = _held_writer(monkeypatch)
    background.save_state_in_background(acc)
    assert acc.project_configuration.iteration == 2  # the next save takes the next number at once
    root = tmp_path / "checkpoints"
    assert "checkpoint_0" in os.listdir(root)  # still the latest complete one while checkpoint_1 is written
    release.set()
    background.wait_for_checkpoint()
    assert [n for n in os.listdir(root) if not n.startswith(".tmp-")] == ["checkpoint_1"]


def test_the_manifest_records_the_step_of_the_snapshot(tmp_path: Path, monkeypatch) -> None:
    acc = make_accelerator(project_dir=str(tmp_path))
    train_step(acc)
    release = _held_writer(monkeypatch)
    path = background.save_state_in_background(acc)
    train_step(acc)
    release.set()
    background.wait_for_checkpoint()
    reader = make_accelerator(seed=9, project_dir=str(tmp_path))
    from notebook_accel.checkpointing import load_state

    load_state(reader, path)
    assert reader.step == 1


def test_too_little_memory_falls_back_to_a_blocking_save_saying_so_once(tmp_path: Path, monkeypatch) -> None:
    background.release_buffers()  # nothing kept from an earlier save: the copy needs new memory
    monkeypatch.setattr(background, "memory_margin", 0.0)
    monkeypatch.setattr(background, "_SAID", set())
    acc = make_accelerator(seed=1)
    with pytest.warns(RuntimeWarning, match="lacks the free host memory .* saving blocking instead"):
        path = background.save_state_in_background(acc, str(tmp_path / "a"))
    assert background.in_flight() is None and os.path.isfile(os.path.join(path, "manifest.json"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        background.save_state_in_background(acc, str(tmp_path / "b"))


def test_a_state_written_from_the_live_engine_is_refused(tmp_path: Path, monkeypatch) -> None:
    acc = make_accelerator()
    live = Saved(Entry("model", 0, "mp_rank_00_model_states.pt", "Net"), lambda: None, lambda s: [],
                 lambda s: None, write=lambda d, s: None, background="DeepSpeed writes from its live engine")
    monkeypatch.setattr(background, "collect", lambda accelerator: [live])
    with pytest.raises(CheckpointError, match=r"cannot write this state in the background: model 0 \(Net\): "
                                              r"DeepSpeed writes from its live engine.*async_save=False"):
        background.save_state_in_background(acc, str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")


def test_the_snapshot_is_taken_before_the_call_returns(tmp_path: Path, monkeypatch) -> None:
    acc = make_accelerator(seed=4)
    train_step(acc)
    before = fingerprint(acc)
    release = _held_writer(monkeypatch)
    path = background.save_state_in_background(acc, str(tmp_path / "c"))
    with torch.no_grad():
        for p in acc._models[0].parameters():
            p.add_(1.0)  # in place: the very storage a state_dict points at
    release.set()
    background.wait_for_checkpoint()
    reader = make_accelerator(seed=5)
    from notebook_accel.checkpointing import load_state

    load_state(reader, path)
    assert fingerprint(reader)["weights"] == before["weights"]


class _Recorder:
    """A channel writer that keeps what it is sent."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def send(self, event: Any) -> None:
        self.events.append(event)


def test_the_dashboard_hears_what_the_writer_is_writing_and_when_it_is_done(tmp_path: Path, monkeypatch) -> None:
    from notebook_accel import channel
    from notebook_accel.events import Phase

    recorder = _Recorder()
    previous = channel.uninstall()
    channel.install(recorder)  # type: ignore[arg-type]  # the same send() as an EventWriter
    try:
        acc = make_accelerator(project_dir=str(tmp_path))
        release = _held_writer(monkeypatch)
        background.save_state_in_background(acc)
        release.set()
        background.wait_for_checkpoint()
        background.save_state_in_background(acc)
        background.wait_for_checkpoint("the training function returned")
    finally:
        channel.uninstall()
        if previous is not None:
            channel.install(previous)
    texts = [e.text for e in recorder.events if isinstance(e, Phase)]
    assert texts[0].startswith("writing checkpoint_0 (") and texts[0].endswith(" KiB) in the background"), texts
    assert texts[1] == "" and texts[2].startswith("writing checkpoint_1 ("), texts
    assert texts[-1] == "", texts  # the rank's status is cleared once the checkpoint is committed


def _scheduling_seen(scheduling: str) -> tuple[str, int, int]:
    """What a thread that called ``_yield_to_training(scheduling)`` got: (the answer, its policy, its nice value)."""
    seen: list[tuple[str, int, int]] = []

    def writer() -> None:
        got = background._yield_to_training(scheduling)
        tid = threading.get_native_id()
        seen.append((got, os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)))

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not hasattr(threading, "get_native_id"),
                    reason="no per-thread SCHED_IDLE on this platform")
def test_the_writer_thread_runs_only_on_cpu_the_loop_leaves_idle() -> None:
    assert background.WRITER_SCHEDULING == "idle"
    assert _scheduling_seen("idle")[:2] == ("idle", os.SCHED_IDLE)
    loop = os.sched_getscheduler(threading.get_native_id())
    assert loop != os.SCHED_IDLE  # only the writer thread, not the training loop's


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not hasattr(threading, "get_native_id"),
                    reason="no per-thread CPU priority on this platform")
def test_the_writer_thread_can_run_niced_or_at_the_loops_priority() -> None:
    loop = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    got, policy, nice = _scheduling_seen("nice")
    assert (got, policy, nice) == ("nice", os.SCHED_OTHER, min(19, loop + background.WRITER_NICENESS)) and nice > loop
    assert _scheduling_seen("normal") == ("normal", os.SCHED_OTHER, loop)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not hasattr(threading, "get_native_id"),
                    reason="no per-thread SCHED_IDLE on this platform")
def test_a_background_save_writes_from_an_idle_priority_thread(tmp_path: Path, monkeypatch) -> None:
    policies: list[int] = []
    inner = background.write_and_commit

    def spy(*args: Any, **kwargs: Any) -> None:
        policies.append(os.sched_getscheduler(threading.get_native_id()))
        inner(*args, **kwargs)

    monkeypatch.setattr(background, "write_and_commit", spy)
    acc = make_accelerator(project_dir=str(tmp_path))
    background.save_state_in_background(acc, str(tmp_path / "c"))
    assert background.wait_for_checkpoint() == str(tmp_path / "c")
    assert policies == [os.SCHED_IDLE]


def test_a_snapshot_that_cannot_be_taken_fails_the_save_at_the_next_call(tmp_path: Path, monkeypatch) -> None:
    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("could not allocate pinned memory")

    monkeypatch.setattr(background, "stage", no_memory)
    acc = make_accelerator(project_dir=str(tmp_path))
    background.save_state_in_background(acc)
    with pytest.raises(CheckpointError, match=r"checkpoint_0' failed: .*RuntimeError: could not allocate pinned"):
        background.wait_for_checkpoint()
    assert not (tmp_path / "checkpoints").exists() or os.listdir(tmp_path / "checkpoints") == []
