"""``DashboardCallback``: a ``transformers.Trainer``'s logs and position on the dashboard.

The ``Trainer`` logs through its callbacks (``on_log``) and moves through ``on_step_end``; this callback turns
them into our events on the worker's channel, from the main process only (every rank logs the same,
already reduced values):

- each ``on_log`` becomes one :class:`~notebook_accel.events.Metrics` at ``state.global_step``, with
  transformers' own naming for trackers: ``eval_loss`` is ``eval/loss``, ``test_x`` is ``test/x``, anything else
  ``train/<name>`` (so ``train/loss`` and ``eval/loss`` share the dashboard's ``loss`` panel). Bookkeeping values
  that would be one dot or a straight line (``epoch``, ``total_flos``, ``*_runtime``, ``*_per_second``) and the
  end-of-training summary are left out (they stay in the printed output);
- training is a ``"train"`` loop of ``state.max_steps`` optimizer steps, with the 1-based epoch; evaluation and
  prediction are an ``"eval"`` loop over the evaluation loader's batches.

Outside a launched worker (no channel) it does nothing, so a Trainer script runs the same without the launcher.
Inside ``notebook_launcher`` the callback is added to every ``Trainer`` automatically (see
:mod:`notebook_accel.integrations`); adding it again by hand does not double the curves.

This module imports ``transformers`` (import it only where transformers is installed).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from notebook_accel import channel
from notebook_accel.events import Metrics, Progress
from notebook_accel.tracking.base import scalar_values

__all__ = ["DashboardCallback", "metric_names"]

_SUMMARY_KEY = "train_runtime"  # only the end-of-training summary has it
_LEFT_OUT = ("epoch", "total_flos")
_LEFT_OUT_SUFFIXES = ("_runtime", "_per_second")
_PREFIXES = ("eval", "test")
_OWNER = "_notebook_accel_dashboard"  # on the TrainerState: which of several instances reports


def metric_names(logs: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one ``Trainer`` log, named for the dashboard (``{}`` for the end-of-training summary).

    Example:
        >>> metric_names({"loss": 0.5, "learning_rate": 1e-4, "epoch": 0.25})
        {'train/loss': 0.5, 'train/learning_rate': 0.0001}
        >>> metric_names({"eval_loss": 0.4, "eval_runtime": 0.1, "epoch": 1.0})
        {'eval/loss': 0.4}
    """
    if _SUMMARY_KEY in logs:
        return {}
    scalars, _ = scalar_values(logs)  # strings and lists in a log are printed by the Trainer, not plotted
    out: dict[str, float] = {}
    for key, value in scalars.items():
        if key in _LEFT_OUT or key.endswith(_LEFT_OUT_SUFFIXES):
            continue
        head, sep, rest = key.partition("_")
        out[f"{head}/{rest}" if sep and head in _PREFIXES else f"train/{key}"] = value
    return out


class DashboardCallback(TrainerCallback):
    """Forwards a ``Trainer``'s logged values and progress to the ``notebook_launcher`` dashboard or console.

    Added automatically to every ``Trainer`` made inside ``notebook_launcher``; by hand elsewhere:

    Example:
        >>> from notebook_accel.integrations.transformers import DashboardCallback
        >>> trainer = Trainer(model=model, args=args, train_dataset=data,   # doctest: +SKIP
        ...                   callbacks=[DashboardCallback()])
    """

    def __init__(self) -> None:
        self._eval_batches = 0
        self._posted: tuple[int, int] | None = None  # the last training position posted

    def _writer(self, state: TrainerState) -> channel.EventWriter | None:
        """The channel when this instance reports for this state: in a launched worker, on the main process,
        and only the first instance of the class a Trainer calls (it may have been added twice)."""
        if not state.is_world_process_zero:
            return None
        writer = channel.current()
        if writer is None:
            return None
        return writer if vars(state).setdefault(_OWNER, id(self)) == id(self) else None

    def _train_progress(self, args: TrainingArguments, state: TrainerState) -> None:
        """Post the training position: ``global_step`` of ``max_steps`` in the current epoch."""
        writer = self._writer(state)
        if writer is not None and self._posted != (state.global_step, state.max_steps):  # once per position
            self._posted = (state.global_step, state.max_steps)
            epoch = max(1, math.ceil(state.epoch or 0.0))
            writer.post(Progress(args.process_index, state.global_step, state.max_steps or None, "train",
                                 time.time(), epoch, "loop"))

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        """Training starts (or resumes at ``global_step``)."""
        self._train_progress(args, state)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        """One optimizer step done."""
        self._train_progress(args, state)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Training ended: the last position, and every posted event sent now."""
        self._train_progress(args, state)
        writer = self._writer(state)
        if writer is not None:
            writer.flush()

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        """Post the log's scalars as one Metrics event at the current global step."""
        writer = self._writer(state)
        values = metric_names(logs or {})
        if writer is not None and values:
            writer.post(Metrics(args.process_index, state.global_step, values, time.time()))

    def on_prediction_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           **kwargs: Any) -> None:
        """One evaluation batch done."""
        self._eval_batches += 1
        writer = self._writer(state)
        if writer is not None:
            loader: Any = kwargs.get("eval_dataloader")
            total = len(loader) if hasattr(loader, "__len__") else None
            writer.post(Progress(args.process_index, self._eval_batches, total, "eval", time.time(), None, "loop"))

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        """An evaluation ended: close its loop (its total is now known) and count afresh next time."""
        self._end_eval(args, state)

    def on_predict(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, metrics: Any = None,
                   **kwargs: Any) -> None:
        """A prediction run ended (as :meth:`on_evaluate`)."""
        self._end_eval(args, state)

    def _end_eval(self, args: TrainingArguments, state: TrainerState) -> None:
        """Post the evaluation loop as complete and reset its count."""
        done, self._eval_batches = self._eval_batches, 0
        writer = self._writer(state)
        if writer is not None and done:
            writer.post(Progress(args.process_index, done, done, "eval", time.time(), None, "loop"))
