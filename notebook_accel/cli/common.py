"""What the subcommands share: exit codes, the usage error, messages on stderr, and config loading."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from notebook_accel.config import Config, find_config_file, load_config
from notebook_accel.errors import NotebookAccelError

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED", "UsageError", "error", "active_config"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(NotebookAccelError, ValueError):
    """A command was called in a way that cannot work (the message says how to call it); exit code 2."""


def error(message: str) -> None:
    """Print ``notebook-accel: error: <message>`` on stderr."""
    print(f"notebook-accel: error: {message}", file=sys.stderr, flush=True)


def active_config(config_file: str | None) -> tuple[Config, Path | None]:
    """The config a command uses: ``--config_file`` if given, else the default file, else built-in defaults.

    Returns:
        The config and the file it came from (``None`` for the built-in defaults).

    Raises:
        ConfigError: the file is missing or invalid.
    """
    path = Path(config_file).expanduser() if config_file else find_config_file()
    if path is None:
        return Config(), None
    return load_config(path), path


MAX_TIMEOUT_S = 7 * 24 * 3600
"""The longest ``--timeout`` (a week): the OS wait behind it takes at most 2**31 ms (~24.8 days)."""


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0 and at most :data:`MAX_TIMEOUT_S` (``nan``, ``inf``, 0, negatives
    and ``1e7``, which the OS wait cannot take, refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from more than 0 to {MAX_TIMEOUT_S} "
                                         "(a week), e.g. 120")
    return value


def process_count(text: str) -> int:
    """argparse type: a whole number of processes from 1 to 1024."""
    if not text.strip().isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes from 1 to 1024")
    return int(text)
