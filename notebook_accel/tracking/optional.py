"""What every tracker built on a third-party package shares: the availability check and a lazy run object.

The package (``wandb``, ``mlflow``, ...) is looked up with ``importlib.util.find_spec`` when the Accelerator is
built, so a missing one fails at once with the pip extra to install; it is imported only when the tracker
starts (``init_trackers``), so ``log_with="all"`` costs nothing until then and processes other than the main one
never import it.

Subclasses say which package and extra they need and implement ``_open`` (create the package's run object),
``store_init_configuration``, ``log`` and ``_close``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel.tracking.base import GeneralTracker, TrackerUnavailableError, scalar_values, warn_skipped

__all__ = ["PackageTracker", "package_available", "require_package"]


def package_available(package: str) -> bool:
    """True when ``package`` can be imported (looked up without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a half-installed package, or a __spec__ of None in sys.modules
        return False


def require_package(tracker: str, package: str, extra: str) -> None:
    """Raise :class:`TrackerUnavailableError` naming the pip extra when ``package`` is not installed."""
    if not package_available(package):
        raise TrackerUnavailableError(
            f"log_with={tracker!r} needs the {package} package, which is not installed; install it with: "
            f'pip install "notebook-accel[{extra}]" (then restart the kernel), or use log_with=\'jsonl\', which '
            "needs no extra package"
        )


class PackageTracker(GeneralTracker):
    """A tracker that writes through a third-party package's run object, created by :meth:`start`.

    Class attributes (besides :class:`GeneralTracker`'s):
        package: the module to import (``"wandb"``).
        extra: the notebook-accel extra that installs it (``"wandb"`` for ``pip install "notebook-accel[wandb]"``).

    Args:
        run_name: the project name from ``init_trackers``.
        logging_dir: the Accelerator's logging directory (used by trackers that write under it), or ``None``.
        **kwargs: ``init_kwargs[<name>]``, passed to the package's run constructor (``run_name`` and
            ``logging_dir`` are positional-only, so the package may have keywords of those names).

    Raises:
        TrackerUnavailableError: the package is not installed.
    """

    package: ClassVar[str] = ""
    extra: ClassVar[str] = ""

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] | None = None, /, **kwargs: Any) -> None:
        super().__init__()
        require_package(self.name, self.package, self.extra)
        self.run_name = run_name
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
        self.init_kwargs = kwargs
        self._run: Any = None
        self._module: Any = None  # the imported package, once started
        self._warned: set[str] = set()

    @classmethod
    def available(cls) -> bool:
        """True when the package this tracker needs is installed."""
        return package_available(cls.package)

    @property
    def tracker(self) -> Any:
        """The package's own run object (``None`` before ``start`` and after ``finish``)."""
        return self._run

    def start(self) -> None:
        """Import the package and create its run object (once)."""
        self._started()

    def _started(self) -> Any:
        """The run object, created on first use."""
        if self._run is None:
            self._module = importlib.import_module(self.package)
            self._run = self._open(self._module)
        return self._run

    def _open(self, module: Any) -> Any:
        """Create the package's run object from the imported ``module``."""
        raise NotImplementedError

    def _close(self, run: Any) -> None:
        """Finish the package's run object."""
        raise NotImplementedError

    def _scalars(
        self, values: Mapping[str, Any], keep: type | tuple[type, ...] = ()
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """The scalar ``values`` as floats, and the other values that are instances of ``keep``; warn once for the
        rest (they cannot be logged by this tracker)."""
        scalars, skipped = scalar_values(values)
        others = {name: values[name] for name in skipped if keep and isinstance(values[name], keep)}
        dropped = [name for name in skipped if name not in others]
        if dropped:
            warn_skipped(self.name, dropped, self._warned)
        return scalars, others

    def finish(self) -> None:
        """Finish the run (flush and close what the package wrote). Safe to call twice."""
        if self._run is not None:
            run, self._run = self._run, None
            self._close(run)
