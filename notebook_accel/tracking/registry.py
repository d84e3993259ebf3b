"""The built-in trackers by name: what ``log_with="<name>"`` builds, what it needs, and what ``"all"`` means.

Each entry is a tracker class taking ``(project_name, logging_dir, **init_kwargs)``. Those with a ``package``
attribute need that package: asking for one by name when it is missing fails when the Accelerator is built
(:func:`require`), and ``"all"`` leaves it out quietly (:func:`available_names`). Importing this module imports
none of those packages.
"""

from __future__ import annotations

from notebook_accel.tracking.aim import AimTracker
from notebook_accel.tracking.base import GeneralTracker
from notebook_accel.tracking.comet import CometMLTracker
from notebook_accel.tracking.dvclive import DVCLiveTracker
from notebook_accel.tracking.jsonl import JSONLTracker
from notebook_accel.tracking.mlflow import MLflowTracker
from notebook_accel.tracking.optional import package_available, require_package
from notebook_accel.tracking.tensorboard import TensorBoardTracker
from notebook_accel.tracking.wandb import WandBTracker

__all__ = ["TRACKERS", "TRACKER_NAMES", "available_names", "require"]

TRACKERS: dict[str, type[GeneralTracker]] = {
    tracker.name: tracker
    for tracker in (
        JSONLTracker,
        TensorBoardTracker,
        WandBTracker,
        MLflowTracker,
        CometMLTracker,
        AimTracker,
        DVCLiveTracker,
    )
}
TRACKER_NAMES: tuple[str, ...] = ("all", "live", *TRACKERS)


def _package(name: str) -> str | None:
    """The package the tracker called ``name`` needs, or ``None``."""
    return getattr(TRACKERS[name], "package", None)


def require(name: str) -> None:
    """Raise :class:`~notebook_accel.tracking.base.TrackerUnavailableError` naming the extra when the package of
    tracker ``name`` is not installed."""
    package = _package(name)
    if package is not None:
        require_package(name, package, getattr(TRACKERS[name], "extra", "") or package)


def available_names() -> list[str]:
    """The trackers ``log_with="all"`` starts besides the live one: jsonl and every one whose package is installed."""
    return [name for name in TRACKERS if (package := _package(name)) is None or package_available(package)]
