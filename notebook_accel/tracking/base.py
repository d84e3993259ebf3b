"""The tracker interface (accelerate's ``GeneralTracker``) and the value handling every tracker shares.

A tracker receives the run's configuration once (:meth:`GeneralTracker.store_init_configuration`), a dict of
values per ``log`` call, and ``finish`` at the end. Only the main process owns real trackers; the hub hands
other processes a blank tracker whose methods do nothing, as accelerate does.

Values are numbers or anything with a ``.item()`` that gives one (0-d tensors, numpy scalars).
:func:`scalar_values` keeps those and reports the names of the rest, which each tracker then writes in its
own way (strings as text in TensorBoard and JSONL) or skips with a one-time warning.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.errors import NotebookAccelError

__all__ = [
    "GeneralTracker",
    "TrackerError",
    "TrackerUnavailableError",
    "scalar_values",
    "warn_skipped",
]


class TrackerError(NotebookAccelError, ValueError):
    """A tracker was asked for in a way that cannot work (unknown name, missing logging directory)."""


class TrackerUnavailableError(NotebookAccelError, ImportError):
    """A tracker needs a package that is not installed (the message names the pip extra to install)."""


class GeneralTracker:
    """Base class of every tracker, with accelerate's interface; subclass it for a custom tracker.

    Class attributes:
        name: the name used in ``log_with=`` and ``get_tracker(name)``.
        requires_logging_directory: True when the tracker writes under the logging directory.
        main_process_only: True when only the main process may write (all built-in trackers).

    A blank tracker (``GeneralTracker(_blank=True)``) is what non-main processes get from ``get_tracker``:
    every method does nothing, so ``accelerator.get_tracker("jsonl").log(...)`` is safe on every rank.

    Example:
        >>> class Printer(GeneralTracker):
        ...     name = "printer"
        ...     def log(self, values, step=None, **kwargs):
        ...         print(step, dict(values))
        >>> Printer().log({"loss": 0.5}, step=3)
        3 {'loss': 0.5}
    """

    name: ClassVar[str] = "general"
    requires_logging_directory: ClassVar[bool] = False
    main_process_only: ClassVar[bool] = True

    def __init__(self, _blank: bool = False) -> None:
        self._blank = _blank

    @property
    def tracker(self) -> Any:
        """The underlying object (a ``SummaryWriter``, an open file), or ``None`` when there is none."""
        return None

    def start(self) -> None:
        """Open whatever the tracker writes to; called once by ``init_trackers`` before any ``log``."""

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Record the run's hyper-parameters (``init_trackers(config=...)``)."""

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` at ``step`` (``None``: the tracker's own counter or no step)."""

    def finish(self) -> None:
        """Flush and close; called by ``end_training``. Safe to call twice."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}{' blank' if self._blank else ''}>"


def _as_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number or a one-element tensor/array; else ``None``."""
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        return float(value) if -(2**1023) < value < 2**1023 else (math.inf if value > 0 else -math.inf)  # float() overflows
    if kind is bool or isinstance(value, (str, bytes)):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if item is None or getattr(value, "ndim", 0) != 0:
        return None
    try:
        out = item()
    except (TypeError, ValueError, RuntimeError):
        return None
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        return None
    return float(out)


def scalar_values(values: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """Split ``values`` into ``{name: float}`` for the scalars and a list of the names that are not scalars.

    Numbers and 0-d tensors/arrays are scalars (``.item()`` is called; NaN and inf are kept, plots skip
    them). Booleans, strings, lists and tensors with more than one element are not.

    Example:
        >>> scalar_values({"loss": 0.5, "note": "hi"})
        ({'loss': 0.5}, ['note'])
    """
    out: dict[str, float] = {}
    skipped: list[str] = []
    for key, value in values.items():
        number = _as_number(value)
        if number is None:
            skipped.append(str(key))
        else:
            out[str(key)] = number
    return out, skipped


def warn_skipped(tracker: str, names: list[str], already: set[str]) -> None:
    """Warn once per name that ``tracker`` skipped a value that is not a scalar."""
    new = [n for n in names if n not in already]
    if not new:
        return
    already.update(new)
    warnings.warn(
        f"tracker {tracker!r} skipped {new}: only numbers and 0-d tensors can be logged there "
        "(call .item() or log a float; this warning is shown once per name)",
        UserWarning,
        stacklevel=4,
    )
