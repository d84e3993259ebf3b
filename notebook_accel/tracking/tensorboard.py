"""The TensorBoard tracker, through ``torch.utils.tensorboard`` (needs the ``tensorboard`` package).

Install it with ``pip install "notebook-accel[tensorboard]"``. Files go to ``<logging_dir>/<project_name>/``;
open them with ``tensorboard --logdir <logging_dir>``. Scalars become ``add_scalar``, strings ``add_text``,
a dict of scalars ``add_scalars``; the init configuration is stored as hyper-parameters (``add_hparams``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.base import GeneralTracker, scalar_values, warn_skipped
from notebook_accel.tracking.optional import package_available, require_package

__all__ = ["TensorBoardTracker", "tensorboard_available", "require_tensorboard"]


def tensorboard_available() -> bool:
    """True when the ``tensorboard`` package can be imported."""
    return package_available("tensorboard")


def require_tensorboard() -> None:
    """Raise :class:`TrackerUnavailableError` naming the pip extra when ``tensorboard`` is missing."""
    require_package("tensorboard", "tensorboard", "tensorboard")


class TensorBoardTracker(GeneralTracker):
    """Writes logged values as TensorBoard event files under ``<logging_dir>/<run_name>``.

    Args:
        run_name: the project name from ``init_trackers`` (a sub-folder of ``logging_dir``).
        logging_dir: the folder TensorBoard reads (``tensorboard --logdir <logging_dir>``).
        **kwargs: passed to ``torch.utils.tensorboard.SummaryWriter`` (``init_kwargs={"tensorboard": {...}}``).

    Raises:
        TrackerUnavailableError: the tensorboard package is not installed.

    Example:
        >>> import tempfile
        >>> t = TensorBoardTracker("demo", tempfile.mkdtemp()); t.start()
        >>> t.log({"loss": 0.5}, step=1); t.finish()
    """

    name: ClassVar[str] = "tensorboard"
    requires_logging_directory: ClassVar[bool] = True
    package: ClassVar[str] = "tensorboard"
    extra: ClassVar[str] = "tensorboard"

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        require_tensorboard()
        self.log_dir = os.path.join(os.fspath(logging_dir), run_name)
        self._kwargs = kwargs
        self._writer: Any = None
        self._warned: set[str] = set()

    @property
    def tracker(self) -> Any:
        """The ``SummaryWriter`` (``None`` before ``start`` and after ``finish``)."""
        return self._writer

    def start(self) -> None:
        """Create the ``SummaryWriter``."""
        self._open()

    def _open(self) -> Any:
        """The writer, created on first use (importing torch.utils.tensorboard only then)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=self.log_dir, **self._kwargs)
        return self._writer

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Store ``values`` as hyper-parameters (non-scalar values are written as strings)."""
        hparams = {
            str(k): v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in dict(values).items()
        }
        self._open().add_hparams(hparams, metric_dict={}, run_name=".")

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write scalars, strings (as text) and dicts of scalars at ``step``; warn once for anything else."""
        writer = self._open()
        scalars, skipped = scalar_values(values)
        for name, number in scalars.items():
            writer.add_scalar(name, number, global_step=step, **kwargs)
        dropped = []
        for name in skipped:
            value = values[name]
            if isinstance(value, str):
                writer.add_text(name, value, global_step=step, **kwargs)
            elif isinstance(value, Mapping) and value and not scalar_values(value)[1]:
                writer.add_scalars(name, scalar_values(value)[0], global_step=step, **kwargs)
            else:
                dropped.append(name)
        if dropped:
            warn_skipped(self.name, dropped, self._warned)
        writer.flush()

    def finish(self) -> None:
        """Flush and close the writer. Safe to call twice."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
