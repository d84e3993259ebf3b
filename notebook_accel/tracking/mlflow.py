"""The MLflow tracker, through ``mlflow`` (``pip install "notebook-accel[mlflow]"`` installs ``mlflow-skinny``).

As in accelerate: the experiment is named after the project (created when missing), one MLflow run is started
in it, the configuration is logged as parameters (values longer than MLflow allows are dropped with a warning,
in batches of MLflow's limit), ``log`` calls ``mlflow.log_metrics(values, step=step)`` and ``end_training``
ends the run. Only numbers and 0-d tensors can be metrics; other values are skipped with one warning per name.

The tracking store is MLflow's own choice (``MLFLOW_TRACKING_URI``, else its default) unless
``init_kwargs={"mlflow": {"tracking_uri": ...}}`` names one, e.g. ``"sqlite:///mlflow.db"`` or a ``file:``
folder (MLflow 3 asks for ``MLFLOW_ALLOW_FILE_STORE=true`` for the latter).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.optional import PackageTracker

__all__ = ["MLflowTracker"]

_OWN_KEYS = ("tracking_uri", "experiment_name", "artifact_location", "logging_dir")


class MLflowTracker(PackageTracker):
    """Logs to an MLflow run (``get_tracker("mlflow", unwrap=True)`` is the ``mlflow.ActiveRun``).

    Args:
        run_name: the project name from ``init_trackers`` (the experiment's name).
        logging_dir: unused (the store is MLflow's tracking URI).
        **kwargs: ``tracking_uri``, ``experiment_name`` (instead of the project name), ``artifact_location``
            (accelerate's ``logging_dir``) for a new experiment; the rest goes to ``mlflow.start_run``
            (``run_id``, ``run_name``, ``tags``, ``description``, ``nested`` or accelerate's ``nested_run``).

    Example:
        >>> accelerator = Accelerator(log_with="mlflow")                                       # doctest: +SKIP
        >>> accelerator.init_trackers("demo", init_kwargs={"mlflow": {"tracking_uri": "sqlite:///mlflow.db"}})
    """

    name: ClassVar[str] = "mlflow"
    package: ClassVar[str] = "mlflow"
    extra: ClassVar[str] = "mlflow"

    def _open(self, module: Any) -> Any:
        """Find or create the experiment and start a run in it."""
        kwargs = dict(self.init_kwargs)
        own = {key: kwargs.pop(key) for key in _OWN_KEYS if key in kwargs}
        if "nested_run" in kwargs:
            kwargs["nested"] = kwargs.pop("nested_run")
        if own.get("tracking_uri"):
            module.set_tracking_uri(own["tracking_uri"])
        experiment_name = str(own.get("experiment_name") or self.run_name)
        experiment = module.get_experiment_by_name(experiment_name)
        if experiment is None:
            location = own.get("artifact_location") or own.get("logging_dir")
            experiment_id = module.create_experiment(experiment_name, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        return module.start_run(experiment_id=experiment_id, **kwargs)

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Log ``values`` as the run's parameters (as strings; too-long values dropped with a warning)."""
        run = self._started()
        limits = importlib.import_module("mlflow.utils.validation")
        max_length, batch = limits.MAX_PARAM_VAL_LENGTH, limits.MAX_PARAMS_TAGS_PER_BATCH
        params = {str(k): v for k, v in dict(values).items()}
        too_long = [k for k, v in params.items() if len(str(v)) > max_length]
        if too_long:
            warnings.warn(
                f"tracker 'mlflow' dropped the parameters {too_long}: MLflow stores at most "
                f"{max_length} characters per parameter (log them as an artifact instead)",
                UserWarning,
                stacklevel=4,
            )
        items = [(k, v) for k, v in params.items() if k not in too_long]
        for i in range(0, len(items), batch):
            self._module.log_params(dict(items[i : i + batch]), run_id=run.info.run_id)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """``mlflow.log_metrics`` with the scalar ``values``; ``kwargs`` go to it."""
        run = self._started()
        scalars, _ = self._scalars(values)
        if scalars:
            at = None if step is None else int(step)
            self._module.log_metrics(scalars, step=at, run_id=run.info.run_id, **kwargs)

    def _close(self, run: Any) -> None:
        """End the run (the active one through ``mlflow.end_run``, else by marking it finished)."""
        mlflow = self._module
        active = mlflow.active_run()
        if active is not None and active.info.run_id == run.info.run_id:
            mlflow.end_run()
        else:
            mlflow.tracking.MlflowClient().set_terminated(run.info.run_id)
