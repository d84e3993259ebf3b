"""Saves killed for real (SIGKILL in a child process) leave nothing that later saves and loads cannot handle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import notebook_accel.checkpointing.atomic as atomic
from notebook_accel.checkpointing import CheckpointError, load_state, save_state
from notebook_accel.checkpointing.atomic import TEMP_PREFIX, owner
from tests.checkpointing.fakes import fingerprint, make_accelerator, train_step

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import os, signal, sys
import notebook_accel.checkpointing.atomic as atomic
import notebook_accel.checkpointing.save as save
from notebook_accel.checkpointing import save_state
from tests.checkpointing.fakes import make_accelerator, train_step

mode, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
acc = make_accelerator(seed=seed)
train_step(acc)
if mode == "between-renames":
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        if os.path.basename(dst).endswith(".old"):
            os.kill(os.getpid(), signal.SIGKILL)  # the old checkpoint is aside, the new one not yet in place
    atomic.os.rename = rename
else:
    real_write = save.write_torch
    def write(file, obj):
        real_write(file, obj)
        os.kill(os.getpid(), signal.SIGKILL)  # one file written, the rest not
    save.write_torch = write
save_state(acc, path)
"""


def _killed_save(mode: str, path: Path, seed: int) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), mode, str(path), str(seed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == -9, done.stderr[-2000:]


def _temporaries(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(TEMP_PREFIX))


def _save_trained(seed: int, path: Path) -> object:
    """Train an Accelerator made with ``seed`` one step, save it to ``path``; its fingerprint."""
    acc = make_accelerator(seed=seed)
    train_step(acc)
    save_state(acc, path)
    return fingerprint(acc)


def _state_of(seed: int) -> object:
    acc = make_accelerator(seed=seed)
    train_step(acc)
    return fingerprint(acc)


def test_a_kill_between_the_commit_renames_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    first = make_accelerator(seed=0)
    train_step(first)
    save_state(first, path)
    _killed_save("between-renames", path, seed=1)
    assert not path.exists()
    leftovers = _temporaries(path)
    assert any(n.endswith(".old") for n in leftovers) and any(not n.endswith(".old") for n in leftovers)

    reader = make_accelerator(seed=5)
    loaded = load_state(reader, path)  # the complete new checkpoint, read where the killed commit left it
    assert fingerprint(reader) == _state_of(1)
    assert os.path.basename(loaded).startswith(".tmp-ckpt-") and not loaded.endswith(".old")
    assert not path.exists(), "a load must change nothing"

    writer = make_accelerator(seed=2)
    train_step(writer)
    save_state(writer, path)
    assert _temporaries(path) == [], "the next save left debris"
    fresh = make_accelerator(seed=7)
    load_state(fresh, path)
    assert fingerprint(fresh) == fingerprint(writer)


def test_a_save_killed_while_writing_leaves_debris_the_next_save_removes(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    _killed_save("while-writing", path, seed=1)
    assert [n for n in _temporaries(path) if n.startswith(".tmp-ckpt-")], "the killed save left no partial folder"
    assert not path.exists()
    acc = make_accelerator(seed=3)
    train_step(acc)
    save_state(acc, path)
    assert _temporaries(path) == []


@pytest.mark.parametrize("other", ["ckpt-pretrain", "ckpt-p1", "old-ckpt"])
def test_another_checkpoints_leftovers_are_not_taken_for_this_ones(tmp_path: Path, other: str) -> None:
    """A commit of ``other`` killed between its renames: its leftovers belong to ``other`` only. Before the exact
    name match, ``ckpt-pretrain``'s new checkpoint was loaded for ``ckpt`` and moved to ``ckpt`` by its next save."""
    _save_trained(0, tmp_path / other)
    _killed_save("between-renames", tmp_path / other, seed=1)
    theirs = _temporaries(tmp_path / other)
    assert len(theirs) == 2
    with pytest.raises(CheckpointError, match="does not exist|not found|no checkpoint"):
        load_state(make_accelerator(seed=5), tmp_path / "ckpt")
    saved = _save_trained(3, tmp_path / "ckpt")
    assert _temporaries(tmp_path / other) == theirs, "a save to ckpt touched another checkpoint's leftovers"
    reader = make_accelerator(seed=5)
    load_state(reader, tmp_path / "ckpt")
    assert fingerprint(reader) == saved
    recovered = make_accelerator(seed=5)
    load_state(recovered, tmp_path / other)
    assert fingerprint(recovered) == _state_of(1)


def test_a_live_saves_temporary_folder_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    live = tmp_path / f"{TEMP_PREFIX}ckpt-{owner()}-0123abcd"  # this process: alive
    live.mkdir()
    other_machine = tmp_path / f"{TEMP_PREFIX}ckpt-p1h00000000-0123abcd"
    other_machine.mkdir()
    acc = make_accelerator(seed=3)
    train_step(acc)
    save_state(acc, path)
    assert live.exists() and other_machine.exists()


@pytest.mark.parametrize("moment", ["after-moving-aside", "before-moving-aside"])
def test_the_stop_button_between_the_commit_renames_keeps_the_previous_checkpoint(tmp_path: Path, moment: str,
                                                                                  monkeypatch) -> None:
    """A KeyboardInterrupt (the notebook's stop button) inside the commit: this process lives on, so nothing would
    recover its own leftovers; the previous checkpoint must be back at the path before the interrupt goes on."""
    import notebook_accel.checkpointing.atomic as atomic

    path = tmp_path / "ckpt"
    first = make_accelerator(seed=0)
    train_step(first)
    save_state(first, path)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    real_rename = os.rename

    def interrupted(src, dst):
        if os.path.basename(dst).endswith(".old"):
            if moment == "after-moving-aside":
                real_rename(src, dst)
            raise KeyboardInterrupt
        return real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", interrupted)
    second = make_accelerator(seed=1)
    train_step(second)
    with pytest.raises(KeyboardInterrupt):
        save_state(second, path)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert _temporaries(path) == []
    reader = make_accelerator(seed=5)
    load_state(reader, path)
    assert fingerprint(reader) == _state_of(0)


def test_a_save_elsewhere_in_the_folder_removes_partial_debris_and_keeps_what_is_recoverable(tmp_path: Path) -> None:
    """Saves to epoch-named folders: a save to epoch1 killed while writing left a partial folder that no later
    save (all to other names) removed. Now any save in the folder removes it, but never another target's
    recoverable commit (a complete new checkpoint and the old one moved aside)."""
    _killed_save("while-writing", tmp_path / "epoch1", seed=1)
    partial = _temporaries(tmp_path / "epoch1")
    assert len(partial) == 1
    _save_trained(0, tmp_path / "epoch2")
    _killed_save("between-renames", tmp_path / "epoch2", seed=2)
    recoverable = _temporaries(tmp_path / "epoch2")
    assert len(recoverable) == 2
    _save_trained(3, tmp_path / "epoch3")
    assert _temporaries(tmp_path / "epoch3") == recoverable, "partial debris stayed, or a recoverable commit went"
    reader = make_accelerator(seed=5)
    load_state(reader, tmp_path / "epoch2")
    assert fingerprint(reader) == _state_of(2)


def _in_a_fork(body: Callable[[], None]) -> None:
    """Run ``body`` in a fork of this process (which imported notebook_accel.checkpointing, as a kernel that
    launches workers has); ``body`` ends by SIGKILLing itself."""
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _kill_at_rename(when: Callable[[str, str], bool], before: bool) -> None:
    """In the fork: SIGKILL this process at the first ``os.rename(src, dst)`` for which ``when(src, dst)``,
    before or after renaming."""
    real = os.rename

    def rename(src: str, dst: str) -> None:
        hit = when(os.fspath(src), os.fspath(dst))
        if hit and before:
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)

    atomic.os.rename = rename  # type: ignore[assignment]  # the fork's own os module; it dies right after


def test_a_forked_workers_killed_commit_is_read_by_load_state(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    _save_trained(0, path)

    def killed() -> None:
        acc = make_accelerator(seed=1)
        train_step(acc)
        _kill_at_rename(lambda src, dst: dst.endswith(".old"), before=False)  # the old one aside, the new not in
        save_state(acc, path)

    _in_a_fork(killed)
    leftovers = _temporaries(path)
    assert all(f"-p{os.getpid()}h" not in name for name in leftovers), leftovers  # the fork's pid, not ours
    reader = make_accelerator(seed=5)
    with pytest.warns(UserWarning, match="a save killed while committing left this complete checkpoint under a "
                                         "temporary name; it stays there .* until the next save to 'ckpt'"):
        assert os.path.basename(load_state(reader, path)).startswith(".tmp-ckpt-")
    assert fingerprint(reader) == _state_of(1)


def test_automatic_resume_after_a_kill_before_the_rename_loads_it_and_numbers_on(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"

    def killed() -> None:
        acc = make_accelerator(seed=1, project_dir=str(tmp_path))
        train_step(acc)
        save_state(acc)  # checkpoint_0
        train_step(acc)
        _kill_at_rename(lambda src, dst: os.path.basename(dst) == "checkpoint_1", before=True)
        save_state(acc)  # complete under .tmp-checkpoint_1-..., never renamed

    _in_a_fork(killed)
    assert sorted(p.name for p in root.iterdir())[-1] == "checkpoint_0"
    expected = make_accelerator(seed=1)
    train_step(expected)
    train_step(expected)
    reader = make_accelerator(seed=5, project_dir=str(tmp_path))
    with pytest.warns(UserWarning, match="the next save_state"):
        loaded = load_state(reader)  # the newest complete state: checkpoint 1, where the killed commit left it
    assert os.path.basename(loaded).startswith(".tmp-checkpoint_1-")
    assert fingerprint(reader) == fingerprint(expected)
    assert reader.project_configuration.iteration == 2
    train_step(reader)
    assert os.path.basename(save_state(reader)) == "checkpoint_2"
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
