"""The DVCLive tracker, through ``dvclive`` (``pip install "notebook-accel[dvclive]"``).

As in accelerate: a ``dvclive.Live(**init_kwargs["dvclive"])`` (or the ``live`` object given there); the
configuration goes to ``params.yaml`` (``log_params``); each ``log`` call sets ``live.step`` when a step is given,
logs each value with ``log_metric`` (a TSV per metric under ``<dir>/plots/metrics``, the latest in
``metrics.json``) and calls ``next_step()``; ``end_training`` calls ``end()``. DVCLive's folder is its own
(``dvclive`` in the working directory unless ``init_kwargs={"dvclive": {"dir": ...}}``). Only numbers and 0-d
tensors are logged; anything else is skipped with one warning per name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.optional import PackageTracker

__all__ = ["DVCLiveTracker"]


class DVCLiveTracker(PackageTracker):
    """Logs with DVCLive (``get_tracker("dvclive", unwrap=True)`` is the ``dvclive.Live``).

    Args:
        run_name: the project name from ``init_trackers`` (DVCLive has no project; unused).
        logging_dir: unused.
        **kwargs: ``live`` (an existing ``dvclive.Live`` to log into), else passed to ``dvclive.Live``
            (``dir``, ``save_dvc_exp``, ``report``, ...).

    Example:
        >>> accelerator = Accelerator(log_with="dvclive")                                          # doctest: +SKIP
        >>> accelerator.init_trackers("demo", init_kwargs={"dvclive": {"dir": "runs/dvclive"}})   # doctest: +SKIP
    """

    name: ClassVar[str] = "dvclive"
    package: ClassVar[str] = "dvclive"
    extra: ClassVar[str] = "dvclive"

    def _open(self, module: Any) -> Any:
        """The given ``live`` object, or ``dvclive.Live(**kwargs)``."""
        kwargs = dict(self.init_kwargs)
        live = kwargs.pop("live", None)
        return live if live is not None else module.Live(**kwargs)

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Write ``values`` to ``params.yaml``."""
        self._started().log_params(dict(values))

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log the scalar ``values`` at ``step`` (DVCLive's own counter when ``None``), then advance the step."""
        live = self._started()
        if step is not None:
            live.step = int(step)
        scalars, _ = self._scalars(values)
        for name, number in scalars.items():
            live.log_metric(name, number, **kwargs)
        live.next_step()

    def _close(self, run: Any) -> None:
        """``live.end()``: writes the summary (and the report, when one was asked for)."""
        run.end()
