"""The Weights & Biases tracker, through the ``wandb`` package (``pip install "notebook-accel[wandb]"``).

As in accelerate: the run is ``wandb.init(project=<project_name>, **init_kwargs["wandb"])``, the configuration
goes to ``run.config``, every ``log`` call is one ``run.log(values, step=step)``, and ``end_training`` calls
``run.finish()``. Numbers and 0-d tensors are sent as floats; other values (strings, ``wandb.Image``,
``wandb.Table``) are passed to wandb as they are. Without an account, run offline: ``init_kwargs={"wandb":
{"mode": "offline"}}`` or the ``WANDB_MODE=offline`` environment variable, then ``wandb sync`` later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.base import scalar_values
from notebook_accel.tracking.optional import PackageTracker

__all__ = ["WandBTracker"]


class WandBTracker(PackageTracker):
    """Logs to a Weights & Biases run (``get_tracker("wandb", unwrap=True)`` is the ``wandb`` run).

    Args:
        run_name: the project name from ``init_trackers`` (wandb's ``project``).
        logging_dir: unused (wandb writes under ``WANDB_DIR`` or ``init_kwargs={"wandb": {"dir": ...}}``).
        **kwargs: passed to ``wandb.init`` (``entity``, ``name``, ``tags``, ``mode``, ``dir``, ...).

    Example:
        >>> accelerator = Accelerator(log_with="wandb")                                          # doctest: +SKIP
        >>> accelerator.init_trackers("demo", config={"lr": 1e-3}, init_kwargs={"wandb": {"mode": "offline"}})
    """

    name: ClassVar[str] = "wandb"
    package: ClassVar[str] = "wandb"
    extra: ClassVar[str] = "wandb"

    def _open(self, module: Any) -> Any:
        """``wandb.init(project=run_name, **kwargs)``."""
        return module.init(project=self.run_name, **self.init_kwargs)

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Add ``values`` to the run's config (replacing values of the same name)."""
        self._started().config.update(dict(values), allow_val_change=True)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """One ``run.log`` call: scalars as floats, anything else as given; ``kwargs`` go to ``run.log``."""
        scalars, others = scalar_values(values)
        out: dict[str, Any] = {name: values[name] for name in others}
        out.update(scalars)
        self._started().log(out, step=None if step is None else int(step), **kwargs)

    def _close(self, run: Any) -> None:
        """``run.finish()``: wandb writes the run's last files (and uploads them when online)."""
        run.finish()
