"""A failing worker's traceback holds the user's frames only, and names the library call the user was in."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import torch
import torch.distributed as dist

from notebook_accel.launcher.child.user_frames import library_call, user_traceback


def _gather_without_a_group() -> None:
    dist.all_gather([torch.ones(1)], torch.ones(1))  # raises inside torch: no process group


def _caught(function: object) -> BaseException:
    try:
        function()  # type: ignore[operator]
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("did not raise")


def test_torch_frames_are_left_out_and_the_users_line_is_named() -> None:
    error = _caught(_gather_without_a_group)
    text = user_traceback(error)
    assert "_gather_without_a_group" in text and "dist.all_gather" in text
    assert "distributed_c10d.py" not in text and "c10d_logger.py" not in text
    assert text.rstrip().endswith("init_process_group.")
    line = _gather_without_a_group.__code__.co_firstlineno + 1
    assert library_call(error.__traceback__) == f'all_gather (File "{__file__}", line {line})'  # the kernel names it


def test_an_error_in_the_users_own_code_names_no_library_call() -> None:
    error = _caught(lambda: json.loads("{"))  # the standard library raising is not a library call of ours
    assert library_call(error.__traceback__) == ""
    assert "json" in user_traceback(error)


def test_the_frames_of_a_cause_are_trimmed_too() -> None:
    def chained() -> None:
        try:
            _gather_without_a_group()
        except ValueError as e:
            raise RuntimeError("wrapped") from e

    text = user_traceback(_caught(chained))
    assert "distributed_c10d.py" not in text and "wrapped" in text and "init_process_group" in text


def test_a_traceback_of_library_frames_only_is_kept_whole() -> None:
    error = _caught(lambda: dist.all_gather([torch.ones(1)], torch.ones(1)))
    tb = error.__traceback__
    while tb is not None and "torch" not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next  # from torch's first frame on: as if torch had been called from nowhere of the user's
    error.__traceback__ = tb
    assert "distributed_c10d.py" in user_traceback(error)


def test_the_standard_librarys_frames_are_left_out() -> None:
    @contextlib.contextmanager
    def refusing() -> Iterator[None]:
        raise RuntimeError("stale lock")
        yield

    def enter() -> None:
        with refusing():
            pass

    text = user_traceback(_caught(enter))
    assert "contextlib.py" not in text and "__enter__" not in text
    assert "with refusing():" in text and 'raise RuntimeError("stale lock")' in text
