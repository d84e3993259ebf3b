"""Asking one question on the terminal: a prompt with a default, answers checked and asked again when wrong."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from notebook_accel.cli.common import UsageError

__all__ = ["ask", "ask_int", "ask_choice"]

T = TypeVar("T")
Choice = TypeVar("Choice", bound=str)
_MAX_TRIES = 5


def ask(prompt: str, default: str | None, parse: Callable[[str], T]) -> T:
    """Ask ``prompt`` on stdin; an empty answer takes ``default``; ``parse`` raises ``ValueError`` (with the
    reason) on a bad answer, which is shown before asking again.

    Raises:
        UsageError: stdin ended, or five bad answers in a row.
    """
    shown = f" [{default}]" if default else ""  # an empty default (optional text) shows no brackets
    for _ in range(_MAX_TRIES):
        try:
            answer = input(f"{prompt}{shown}: ").strip()
        except EOFError as e:
            raise UsageError(f"input ended before the question {prompt!r} was answered; answer every question, "
                             "or use `notebook-accel config --default`") from e
        if not answer:
            if default is None:
                print("  an answer is needed")
                continue
            answer = default
        try:
            return parse(answer)
        except ValueError as e:
            print(f"  {e}")
    raise UsageError(f"no valid answer to {prompt!r} after {_MAX_TRIES} tries")


def ask_int(prompt: str, default: int | None, low: int, high: int | None = None) -> int:
    """Ask for a whole number in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            upper = f" and {high}" if high is not None else " or more"
            raise ValueError(f"{value} is out of range; answer between {low}{upper}" if high is not None
                             else f"{value} is too small; answer {low}{upper}")
        return value

    return ask(prompt, None if default is None else str(default), parse)


def ask_choice(prompt: str, choices: Sequence[Choice], default: Choice) -> Choice:
    """Ask for one of ``choices`` (case-insensitive); the answer has their type (e.g. a ``Literal``)."""

    def parse(text: str) -> Choice:
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise ValueError(f"{text!r} is not one of {', '.join(choices)}")

    return ask(f"{prompt} ({'/'.join(choices)})", default, parse)
