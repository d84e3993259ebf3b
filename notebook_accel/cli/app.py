"""The argument parser and the entry point: each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from notebook_accel import __version__
from notebook_accel.cli import config_cmd, env_cmd, launch_cmd, selftest_cmd
from notebook_accel.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, UsageError, error
from notebook_accel.config import ConfigError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The ``notebook-accel`` parser with its four subcommands."""
    parser = argparse.ArgumentParser(
        prog="notebook-accel",
        description="Configure, inspect and launch notebook-accel runs from a terminal.",
        epilog="Exit codes: 0 ok, 2 usage or config error, 1 the run failed.",
    )
    parser.add_argument("--version", action="version", version=f"notebook-accel {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for module in (config_cmd, env_cmd, launch_cmd, selftest_cmd):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (the ``notebook-accel`` console script).

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns:
        0 on success, 2 for a usage or config error, 1 when a launched run failed, 130 when interrupted.

    Example:
        >>> main(["env"])   # doctest: +SKIP
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # --help, --version (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        return int(args.run(args))
    except (ConfigError, UsageError) as e:
        error(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
