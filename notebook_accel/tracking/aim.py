"""The Aim tracker, through ``aim`` (``pip install "notebook-accel[aim]"``; a large install, with its own UI).

As in accelerate: an ``aim.Run`` in the repository at the logging directory (``Accelerator(project_dir=...)``),
named after the project; the configuration goes to ``run["hparams"]``; each value of a ``log`` call is one
``run.track(value, name=..., step=step)``; ``end_training`` closes the run. Numbers and 0-d tensors are tracked as
floats, Aim objects (``aim.Image``, ``aim.Text``, ``aim.Distribution``) as given; anything else is skipped with one
warning per name. See the runs with ``aim up --repo <logging_dir>``.

Aim's storage runs threads in C++ (RocksDB) in any process that opened a repository; a fork does not copy them, so a
worker forked from a kernel that had used Aim waits forever when it closes its run. Use Aim in the training
function only (reading a repository in the notebook is fine after the launches).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.optional import PackageTracker

__all__ = ["AimTracker"]


class AimTracker(PackageTracker):
    """Logs to an Aim run (``get_tracker("aim", unwrap=True)`` is the ``aim.Run``).

    Args:
        run_name: the project name from ``init_trackers`` (the run's name).
        logging_dir: the Aim repository (created when missing).
        **kwargs: passed to ``aim.Run`` (``experiment``, ``system_tracking_interval``, ``log_system_params``, ...).

    Example:
        >>> accelerator = Accelerator(log_with="aim", project_dir="runs")                         # doctest: +SKIP
        >>> accelerator.init_trackers("demo", config={"lr": 1e-3})                              # doctest: +SKIP
    """

    name: ClassVar[str] = "aim"
    package: ClassVar[str] = "aim"
    extra: ClassVar[str] = "aim"
    requires_logging_directory: ClassVar[bool] = True

    def _open(self, module: Any) -> Any:
        """``aim.Run(repo=logging_dir, **kwargs)``, named after the project."""
        run = module.Run(repo=self.logging_dir, **self.init_kwargs)
        run.name = self.run_name
        return run

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Store ``values`` as the run's ``hparams``."""
        self._started()["hparams"] = dict(values)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """``run.track`` each scalar (as a float) and each Aim object; ``kwargs`` (``context``, ``epoch``) go along."""
        run = self._started()
        aim_object = importlib.import_module("aim.storage.object").CustomObject
        scalars, others = self._scalars(values, keep=aim_object)
        at = None if step is None else int(step)
        for name, value in {**scalars, **others}.items():
            run.track(value, name=name, step=at, **kwargs)

    def _close(self, run: Any) -> None:
        """``run.close()``: stops Aim's background threads and finalises the run."""
        run.close()
