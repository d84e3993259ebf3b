"""accelerate's environment helpers (``accelerate.utils.environment``): truth values, flags, choices and integers read
from environment variables, and blocks that patch or clear the environment for a while.

accelerate's own scripts read their switches with them (``PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))``
in 1.16's ``test_ops.py``), and so does code written against accelerate. The answers are accelerate's; a value that
is not a truth value gets an error that names the variable, its value and the values allowed. Every read and write
goes through :mod:`notebook_accel.environment`.

Example:
    >>> from notebook_accel.utils import parse_flag_from_env, patch_environment
    >>> with patch_environment(use_cpu="yes"):
    ...     parse_flag_from_env("USE_CPU")
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Literal, overload

from notebook_accel import environment

__all__ = ["str_to_bool", "parse_flag_from_env", "parse_choice_from_env", "get_int_from_env", "patch_environment",
           "clear_environment"]

TRUE_VALUES: tuple[str, ...] = ("y", "yes", "t", "true", "on", "1")
FALSE_VALUES: tuple[str, ...] = ("n", "no", "f", "false", "off", "0")


@overload
def str_to_bool(value: str, to_bool: Literal[False] = False) -> int: ...
@overload
def str_to_bool(value: str, to_bool: Literal[True]) -> bool: ...
def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1``/``0`` (``True``/``False`` with ``to_bool=True``) for a truth value, in any case: ``y``, ``yes``, ``t``,
    ``true``, ``on``, ``1`` are true; ``n``, ``no``, ``f``, ``false``, ``off``, ``0`` are false (accelerate's).

    Raises:
        ValueError: ``value`` is neither; the message lists both sets.
    """
    if not isinstance(value, str):
        raise TypeError(f"str_to_bool expects a string such as 'true' or '0', got {type(value).__name__} {value!r}")
    lowered = value.strip().lower()
    if lowered in TRUE_VALUES:
        return True if to_bool else 1
    if lowered in FALSE_VALUES:
        return False if to_bool else 0
    raise ValueError(f"invalid truth value {value!r}: use one of {', '.join(TRUE_VALUES)} (true) or "
                     f"{', '.join(FALSE_VALUES)} (false)")


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Whether environment variable ``key`` holds a true value (:func:`str_to_bool`); ``default`` when it is unset.

    Raises:
        ValueError: the variable is set to something that is not a truth value (the message names it).
    """
    value = environment.get(key)
    if value is None:
        return str_to_bool(str(default)) == 1
    try:
        return str_to_bool(value) == 1
    except ValueError as exc:
        raise ValueError(f"environment variable {key}={value!r} is not a truth value: set it to one of "
                         f"{', '.join(TRUE_VALUES)} or {', '.join(FALSE_VALUES)}, or unset it") from exc


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """The value of environment variable ``key``, or ``default`` when it is unset (accelerate's; not checked)."""
    value = environment.get(key)
    return str(default) if value is None else value


def get_int_from_env(env_keys: Iterable[str], default: int) -> int:
    """The first of ``env_keys`` set to a whole number of 0 or more, else ``default`` (accelerate's: a negative value
    is passed over, as if unset).

    Raises:
        ValueError: a variable is set to something that is not a whole number (the message names it).
    """
    if isinstance(env_keys, str):
        raise TypeError(f"get_int_from_env takes a list of variable names, got the string {env_keys!r}: "
                        f"write get_int_from_env([{env_keys!r}], default)")
    for key in env_keys:
        raw = environment.get(key)
        if raw is None or not raw.strip():
            continue
        try:
            value = int(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {key}={raw!r} is not a whole number; set it to one (such as 4) "
                             "or unset it") from exc
        if value >= 0:
            return value
    return default


@contextmanager
def patch_environment(**kwargs: object) -> Iterator[None]:
    """Set variables for the duration of a ``with`` block, then put back what was there (accelerate's: names are
    upper-cased and values turned into strings, ``patch_environment(master_port=29501)`` sets ``MASTER_PORT``).

    A variable that was unset before the block is removed after it, even one the block changed.
    """
    values = {name.upper(): str(value) for name, value in kwargs.items()}
    with environment.patched_environ(values):
        yield


@contextmanager
def clear_environment() -> Iterator[None]:
    """Run a ``with`` block with an empty environment, then put every variable back as it was (accelerate's:
    a variable the block set is removed again)."""
    with environment.cleared_environ():
        yield
