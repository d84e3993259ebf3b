"""The tracker hub: what ``Accelerator(log_with=...)``, ``init_trackers``, ``log`` and ``get_tracker`` delegate to.

Decisions (where we differ from accelerate, on purpose):

- **The live dashboard is always fed.** On the main process of a run started by ``notebook_launcher`` (a
  channel exists), every ``accelerator.log(...)`` goes to the dashboard, even without ``log_with`` and before
  (or without) ``init_trackers``; accelerate would drop those values. Outside a launched worker there is no
  channel and the live tracker is silent.
- **Other trackers start with ``init_trackers``.** ``jsonl``, ``tensorboard`` and custom trackers receive values
  only after ``init_trackers(project_name, ...)``; values logged before it reach only the dashboard.
- **Only the main process writes.** On other ranks the hub holds no tracker: ``log`` does nothing and
  ``get(name)`` returns a blank tracker whose methods do nothing.
- ``log_with`` accepts ``None``, ``"all"`` (live, jsonl, and every tracker whose package is installed:
  tensorboard, wandb, mlflow, comet_ml, aim, dvclive), a name (``"live"``, ``"jsonl"``, ``"tensorboard"``,
  ``"wandb"``, ``"mlflow"``, ``"comet_ml"``, ``"aim"``, ``"dvclive"``), a :class:`GeneralTracker` instance, or a
  list of these. Unknown names, a tracker named whose package is missing, and trackers that write under the
  logging directory (jsonl, tensorboard, aim) without one are refused when the hub is built (so
  ``Accelerator(...)`` fails at once, on every rank, not in the middle of a run).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from notebook_accel.monitor.board import SystemBoard
from notebook_accel.tracking.base import GeneralTracker, TrackerError
from notebook_accel.tracking.live import LiveTracker
from notebook_accel.tracking.registry import TRACKER_NAMES, TRACKERS, available_names, require
from notebook_accel.errors import shown

__all__ = ["TrackerHub", "TrackerName", "LogWith", "TRACKER_NAMES"]

TrackerName = Literal["live", "jsonl", "tensorboard", "wandb", "mlflow", "comet_ml", "aim", "dvclive"]
LogWith = Union[str, GeneralTracker, Sequence[Union[str, GeneralTracker]], None]


def _resolve(log_with: LogWith) -> tuple[bool, list[str], list[GeneralTracker]]:
    """Split ``log_with`` into (live requested, built-in tracker names, tracker instances); refuse unknown names."""
    if log_with is None:
        return False, [], []
    if not isinstance(log_with, (str, GeneralTracker, list, tuple)):
        raise TrackerError(
            f"log_with={shown(log_with, 80)} is not allowed; pass a tracker name from {list(TRACKER_NAMES)}, a "
            "GeneralTracker instance, a list of them, or None"
        )
    items: Sequence[Any] = [log_with] if isinstance(log_with, (str, GeneralTracker)) else log_with
    live, names, instances = False, [], []
    for item in items:
        if isinstance(item, GeneralTracker):
            instances.append(item)
            continue
        if not isinstance(item, str):
            raise TrackerError(
                f"log_with got {shown(item)} ({type(item).__name__}); pass tracker names from {list(TRACKER_NAMES)}, "
                "GeneralTracker instances, or a list of them"
            )
        key = item.strip().lower()
        if key == "all":
            live = True
            names += available_names()
        elif key == "live":
            live = True
        elif key in TRACKERS:
            names.append(key)
        else:
            raise TrackerError(
                f"unknown tracker {shown(item)} in log_with; allowed names are {list(TRACKER_NAMES)} "
                "(or pass a GeneralTracker instance for a custom tracker)"
            )
    return live, list(dict.fromkeys(names)), instances


class TrackerHub:
    """Owns a process's trackers and routes ``log`` calls to them (see the module docstring for the rules).

    Args:
        log_with: which trackers to use (names, instances, ``"all"``, a list, or ``None``).
        logging_dir: the folder file trackers write under (``ProjectConfiguration.logging_dir``).
        is_main_process: only the main process keeps trackers and writes.
        rank: this process's rank (stamped on live metrics).
        system: the run's system figures (``Accelerator(log_system_metrics=True)`` in a launched run): each
            ``log`` after a new sample also sends them, as ``system/rank<r>/...`` values at the same step, to the
            trackers ``start`` created (the dashboard shows them in its own panel). ``None``: none are sent.

    Raises:
        TrackerError: an unknown tracker name, or ``jsonl``/``tensorboard``/``aim`` without a logging directory.
        TrackerUnavailableError: a tracker asked for by name whose package is not installed (the message names
            the pip extra, e.g. ``pip install "notebook-accel[wandb]"``).

    Example:
        >>> hub = TrackerHub(log_with="jsonl", logging_dir="runs", is_main_process=False, rank=1)
        >>> hub.log({"loss": 1.0}, step=0, log_kwargs={})  # not the main process: nothing is written
        >>> hub.trackers
        []
    """

    def __init__(
        self,
        log_with: LogWith = None,
        logging_dir: str | os.PathLike[str] | None = None,
        is_main_process: bool = True,
        rank: int = 0,
        system: SystemBoard | None = None,
    ) -> None:
        _, self._names, self._instances = _resolve(log_with)  # "live" needs nothing: it is always on
        for name in self._names:
            require(name)
            if logging_dir is None and TRACKERS[name].requires_logging_directory:
                raise TrackerError(
                    f"tracker {shown(name)} writes files but no logging directory was given; pass "
                    "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...), or drop it from log_with"
                )
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
        self.is_main_process = is_main_process
        self.rank = rank
        self._live = LiveTracker(rank) if is_main_process else None
        self._started: list[GeneralTracker] = []
        self._finished = False
        self._system = system if is_main_process else None

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The trackers that receive values now: the live one when launched, then those ``start`` created."""
        live = [self._live] if self._live is not None and self._live.active else []
        return live + self._started

    def start(self, project_name: str, config: Mapping[str, Any] | None, init_kwargs: Mapping[str, Any]) -> None:
        """Create and start the requested trackers (main process only) and store ``config`` in each.

        Args:
            project_name: the run's name (file trackers write under ``<logging_dir>/<project_name>``; wandb and
                Comet use it as the project, MLflow as the experiment).
            config: hyper-parameters to record, or ``None``.
            init_kwargs: per-tracker keyword arguments, e.g. ``{"wandb": {"mode": "offline"}}``.
        """
        if not self.is_main_process or self._started:
            return
        for name in self._names:
            kwargs = dict(init_kwargs.get(name, {}))
            factory: Callable[..., GeneralTracker] = TRACKERS[name]  # (project_name, logging_dir, **init_kwargs)
            self._started.append(factory(project_name, self.logging_dir, **kwargs))
        self._started.extend(self._instances)
        for tracker in self._started:
            tracker.start()
            if config is not None:
                tracker.store_init_configuration(config)

    def log(self, values: Mapping[str, Any], step: int | None, log_kwargs: Mapping[str, Any]) -> None:
        """Send ``values`` at ``step`` to every tracker (main process only).

        ``log_kwargs`` are per-tracker keyword arguments, e.g. ``{"tensorboard": {"walltime": 0.0}}``.
        """
        live = self._live
        if live is None:
            return
        if self._system is not None and self._started:
            self._log_system(step)
        if not log_kwargs:  # the common case, kept short: this runs at every training step
            live.log(values, step)
            for tracker in self._started:
                tracker.log(values, step)
            return
        live.log(values, step, **log_kwargs.get("live", {}))
        for tracker in self._started:
            tracker.log(values, step, **log_kwargs.get(tracker.name, {}))

    def _log_system(self, step: int | None) -> None:
        """Send the run's system figures to the started trackers when they changed since the last ``log``."""
        values = self._system.fresh() if self._system is not None else {}
        if values:
            for tracker in self._started:
                tracker.log(values, step)

    def get(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (its underlying object with ``unwrap=True``).

        On a process that is not the main one, or before any tracker exists, a blank tracker is returned
        (its methods do nothing), as in accelerate.

        Raises:
            TrackerError: the main process has trackers but none is called ``name``.
        """
        trackers = self.trackers if self.is_main_process else []
        if not trackers:
            return GeneralTracker(_blank=True)
        for tracker in trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        raise TrackerError(
            f"no tracker called {shown(name)}; the trackers of this run are {[t.name for t in trackers]} "
            "(ask for one of them, or add it to Accelerator(log_with=...) and call init_trackers)"
        )

    def finish(self) -> None:
        """Finish every tracker, the last started first (flush the live channel, close files). Safe to call twice."""
        if self._finished:
            return
        self._finished = True
        if self._live is not None:
            self._live.finish()
        # Last started, first finished: wandb, Comet and Aim each wrap sys.stdout/stderr when they start and put
        # back what they found when they finish, so finishing in start order restores a wrapper already
        # unwound (comet_ml then aim ended in a RecursionError at every write).
        for tracker in reversed(self._started):
            tracker.finish()
