"""The Accelerator's trackers: the hub that ``log`` writes to, opened with the run's system figures when asked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from notebook_accel.state import ProcessState

if TYPE_CHECKING:  # the tracker modules load only when an Accelerator is built
    from notebook_accel.tracking import TrackerHub

__all__ = ["open_trackers"]


def open_trackers(log_with: Any, logging_dir: str | None, state: ProcessState, log_system_metrics: bool) -> TrackerHub:
    """The tracker hub of ``Accelerator(log_with=..., log_system_metrics=...)``; its trackers start in
    ``init_trackers``.

    Raises:
        TrackerError: an unknown tracker, or one that needs a logging directory without one.
        TrackerUnavailableError: a tracker whose package is not installed.
    """
    from notebook_accel.monitor.board import tracker_board
    from notebook_accel.tracking import TrackerHub

    system = tracker_board(log_system_metrics, state.is_main_process)
    return TrackerHub(log_with=log_with, logging_dir=logging_dir, is_main_process=state.is_main_process,
                      rank=state.process_index, system=system)
