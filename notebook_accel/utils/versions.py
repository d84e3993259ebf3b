"""accelerate's version checks (``accelerate.utils.versions``): ``is_torch_version(">=", "2.4")`` and
``compare_versions("transformers", ">=", "4.40")``, which code written for accelerate uses to pick a code path.

Versions are compared by PEP 440 (``packaging``, which matplotlib and ipykernel already require), so
``"2.13.0+cpu" >= "2.13"`` and a pre-release sorts before its release, as in accelerate.

Example:
    >>> from notebook_accel.utils import compare_versions, is_torch_version
    >>> is_torch_version(">=", "2.2"), compare_versions("2.10.1", "<", "2.9")
    (True, False)
"""

from __future__ import annotations

import importlib.metadata
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # imported on first use (_parse): importing this module loads no packaging
    from packaging.version import Version

__all__ = ["compare_versions", "is_torch_version", "OPERATIONS"]

#: The comparisons accelerate accepts, by their spelling.
OPERATIONS: dict[str, Callable[[Version, Version], bool]] = {
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
}


def _parse(text: str, what: str) -> Version:
    """``text`` as a PEP 440 version (``packaging`` is imported on first use)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ValueError(f"{what} {text!r} is not a version number (PEP 440, such as '2.4' or '4.40.1')") from exc


def _operation(caller: str, operation: str) -> Callable[[Version, Version], bool]:
    """The comparison ``operation`` names; a ValueError that lists the allowed ones for anything else."""
    if operation not in OPERATIONS:
        raise ValueError(f"{caller}: operation {operation!r} is not one of {', '.join(OPERATIONS)}")
    return OPERATIONS[operation]


def compare_versions(library_or_version: str, operation: str, requirement_version: str) -> bool:
    """Whether ``library_or_version`` (an installed distribution's name, or a version string) compares to
    ``requirement_version`` by ``operation`` (one of ``>``, ``>=``, ``==``, ``!=``, ``<=``, ``<``).

    A name is looked up as an installed distribution first; a string that is no installed name is read as a version.

    Raises:
        ValueError: an unknown operation, or a string that is neither an installed distribution nor a version
            (the message says which).
    """
    compare = _operation("compare_versions", operation)
    try:
        installed = importlib.metadata.version(library_or_version)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        installed = None
    if installed is None:
        version = _parse(library_or_version, "compare_versions: not an installed distribution, and")
    else:
        version = _parse(installed, f"compare_versions: {library_or_version}'s installed version")
    return compare(version, _parse(requirement_version, "compare_versions: the requirement"))


def is_torch_version(operation: str, version: str) -> bool:
    """Whether the running torch compares to ``version`` by ``operation`` (its local part, ``+cpu``, is ignored:
    ``is_torch_version(">=", "2.13")`` holds for ``2.13.0+cpu``)."""
    compare = _operation("is_torch_version", operation)
    running = _parse(str(torch.__version__).split("+")[0], "is_torch_version: torch's version")
    return compare(running, _parse(version, "is_torch_version: the requirement"))
