"""The Comet tracker, through ``comet_ml`` (``pip install "notebook-accel[comet]"``).

As in accelerate: the experiment is ``comet_ml.start(project_name=<project_name>, **init_kwargs["comet_ml"])``,
the configuration is logged with ``log_parameters``, ``log`` sets the experiment's step and logs numbers as
metrics, strings as "others" and dicts of numbers as metrics under ``<name>_<key>``; ``end_training`` calls
``end()``. Without an account, run offline: ``init_kwargs={"comet_ml": {"online": False}}`` or
``COMET_START_ONLINE=false`` (the archive goes to ``COMET_OFFLINE_DIRECTORY``; ``comet upload`` sends it later).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.base import scalar_values, warn_skipped
from notebook_accel.tracking.optional import PackageTracker

__all__ = ["CometMLTracker"]


class CometMLTracker(PackageTracker):
    """Logs to a Comet experiment (``get_tracker("comet_ml", unwrap=True)`` is the experiment).

    Args:
        run_name: the project name from ``init_trackers`` (Comet's ``project_name``).
        logging_dir: unused.
        **kwargs: passed to ``comet_ml.start`` (``workspace``, ``online``, ``experiment_config``, ...).

    Example:
        >>> accelerator = Accelerator(log_with="comet_ml")                                        # doctest: +SKIP
        >>> accelerator.init_trackers("demo", init_kwargs={"comet_ml": {"online": False}})       # doctest: +SKIP
    """

    name: ClassVar[str] = "comet_ml"
    package: ClassVar[str] = "comet_ml"
    extra: ClassVar[str] = "comet"

    def _open(self, module: Any) -> Any:
        """``comet_ml.start(project_name=run_name, **kwargs)``."""
        return module.start(project_name=self.run_name, **self.init_kwargs)

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Log ``values`` as the experiment's parameters."""
        self._started().log_parameters(dict(values))

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers as metrics, strings as others, dicts of numbers as prefixed metrics, at ``step``."""
        experiment = self._started()
        at = None if step is None else int(step)
        if at is not None:
            experiment.set_step(at)
        scalars, others = self._scalars(values, keep=(str, Mapping))
        if scalars:
            experiment.log_metrics(scalars, step=at, **kwargs)
        for name, value in others.items():
            if isinstance(value, str):
                experiment.log_other(name, value)
                continue
            numbers, rest = scalar_values(value)
            experiment.log_metrics(numbers, prefix=name, step=at, **kwargs)
            if rest:
                warn_skipped(self.name, [f"{name}.{key}" for key in rest], self._warned)

    def _close(self, run: Any) -> None:
        """``experiment.end()``: uploads (online) or writes the offline archive."""
        run.end()
