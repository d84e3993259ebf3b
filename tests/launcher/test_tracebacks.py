"""Errors leave notebook_launcher without the launcher's frames; the user's own frames stay."""

from __future__ import annotations

import pickle
import re
import traceback
from pathlib import Path

import pytest

from notebook_accel.errors import LaunchError
from notebook_accel.launcher import LaunchTimeoutError, notebook_launcher
from notebook_accel.launcher.tracebacks import user_facing, without_launcher_frames


def _files(exc: BaseException) -> list[str]:
    return [Path(f.filename).name for f in traceback.extract_tb(exc.__traceback__)]


def test_a_refused_launch_shows_only_the_callers_frame() -> None:
    with pytest.raises(LaunchError) as info:
        notebook_launcher(print, num_processes=-3)
    assert _files(info.value) == ["test_tracebacks.py", "tracebacks.py"]  # the call, and the hidden re-raise


def test_the_cause_of_a_refused_launch_loses_our_frames_too() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(LaunchError) as info:
            notebook_launcher(print, num_processes=2, use_port=busy.getsockname()[1])
    assert isinstance(info.value.__cause__, OSError)
    assert _files(info.value.__cause__) == []


def user_code_that_fails() -> None:
    raise ValueError("user code failed")


def test_in_process_runs_keep_the_users_frames() -> None:
    with pytest.raises(ValueError) as info:
        notebook_launcher(user_code_that_fails, num_processes=1, dashboard=False)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.name for f in frames if Path(f.filename).name == "test_tracebacks.py"] == [
        "test_in_process_runs_keep_the_users_frames", "user_code_that_fails",
    ]  # the user's own exception is raised unchanged in process (so %debug works), launcher frames included


def test_other_exceptions_keep_their_whole_traceback() -> None:
    @user_facing
    def buggy() -> None:
        raise ZeroDivisionError("a bug in the launcher itself must show where")

    with pytest.raises(ZeroDivisionError) as info:
        buggy()
    assert not hasattr(info.value, "_render_traceback_")
    assert len(traceback.extract_tb(info.value.__traceback__)) == 3  # test, wrapper, buggy


def test_the_ipython_renderer_pickles_and_fails_over_outside_ipython() -> None:
    with pytest.raises(LaunchError) as info:
        notebook_launcher(print, num_processes=-3)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value)
    with pytest.raises(LookupError):
        info.value._render_traceback_()  # type: ignore[attr-defined]  # IPython falls back to its own rendering


def test_without_launcher_frames_of_nothing() -> None:
    assert without_launcher_frames(None) is None


def user_code_that_resumes_a_missing_checkpoint(path: str) -> None:
    from notebook_accel import Accelerator

    Accelerator().load_state(path)


def test_an_in_process_error_of_the_accelerator_shows_the_users_frames_only(shell: object, tmp_path: Path) -> None:
    # tutorial 04: load_state refused a checkpoint in a 1-process run, and the cell showed the Accelerator's and the
    # checkpointing modules' frames, with the paths of the checkout they were installed from
    from notebook_accel.errors import NotebookAccelError

    with pytest.raises(NotebookAccelError) as info:
        notebook_launcher(user_code_that_resumes_a_missing_checkpoint, args=(str(tmp_path / "none"),),
                          num_processes=1, dashboard=False)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(info.value._render_traceback_()))  # type: ignore[attr-defined]
    assert "user_code_that_resumes_a_missing_checkpoint" in shown and "load_state(path)" in shown, shown
    assert "notebook_accel/" not in shown, shown
