"""Slurm's time limits (``--time``) as text and as minutes, without Slurm: ``"90"``, ``"1:30:00"``, ``"2-12"``,
``"infinite"``."""

from __future__ import annotations

import re

__all__ = ["FORMS", "time_minutes"]

FORMS = ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
_ENDLESS = frozenset({"infinite", "unlimited"})


def time_minutes(text: str) -> float | None:
    """``text`` in minutes (``None``: no limit, Slurm's ``infinite``/``UNLIMITED``).

    Raises:
        ValueError: not one of Slurm's forms (:data:`FORMS`).

    Example:
        >>> time_minutes("1:30:00"), time_minutes("2-0"), time_minutes("45")
        (90.0, 2880.0, 45.0)
    """
    if text.strip().lower() in _ENDLESS:
        return None
    match = _TIME.match(text.strip())
    if match is None:
        raise ValueError(text)
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 1440 + int(first) * 60 + int(second or 0) + int(third or 0) / 60
    if third is not None:  # HH:MM:SS
        return int(first) * 60 + int(second) + int(third) / 60
    return int(first) + int(second or 0) / 60  # MM[:SS]
