"""Small value checks shared by the engine settings tables (:mod:`.fsdp`, :mod:`.deepspeed`).

Each check takes a value and returns ``(canonical value, problem or None)``; the problem says what was given and
what is allowed, without the field name (the caller adds the name it knows the value by).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from notebook_accel.config.accelerate_keys import suggest

__all__ = ["Check", "run_checks", "show", "check_bool", "choice_check", "check_class_names", "optional"]

Check = Callable[[Any], "tuple[Any, str | None]"]


def show(value: Any) -> str:
    """``repr`` plus type, short enough for one line."""
    text = repr(value)
    return f"{text[:57] + '...' if len(text) > 60 else text} ({type(value).__name__})"


def check_bool(value: Any) -> tuple[Any, str | None]:
    """``True`` or ``False`` only."""
    if isinstance(value, bool):
        return value, None
    return value, f"got {show(value)}; allowed: true or false"


def choice_check(choices: tuple[str, ...], *, upper: bool = True) -> Check:
    """A check for a name among ``choices`` (any case accepted, made upper or lower case), with a did-you-mean."""

    def check(value: Any) -> tuple[Any, str | None]:
        if isinstance(value, str):
            name = value.strip().upper() if upper else value.strip().lower()
            if name in choices:
                return name, None
        guess = suggest(value, choices) if isinstance(value, str) else None
        hint = f" (did you mean {guess!r}?)" if guess else ""
        return value, f"got {show(value)}{hint}; allowed: {', '.join(repr(c) for c in choices)}"

    return check


def check_class_names(value: Any) -> tuple[Any, str | None]:
    """A list of class names, or one comma-separated string (as accelerate's file writes it); ``None`` is fine."""
    if value is None:
        return None, None
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, (list, tuple)) and all(isinstance(i, str) and i.strip().isidentifier() for i in items):
        names = [i.strip() for i in items]
        if names:
            return names, None
    return value, f"got {show(value)}; allowed: module class names, e.g. 'LlamaDecoderLayer' or ['Block', 'Head']"


def optional(check: Check) -> Check:
    """``check``, with ``None`` also allowed (and kept)."""

    def wrapped(value: Any) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        return check(value)

    return wrapped


def run_checks(checks: Mapping[str, Check], values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(canonical values, {field: problem})`` for the fields of ``values`` that ``checks`` knows (others skipped)."""
    out: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, value in values.items():
        if name in checks:
            out[name], problem = checks[name](value)
            if problem is not None:
                problems[name] = problem
    return out, problems
