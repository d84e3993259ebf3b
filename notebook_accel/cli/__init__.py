"""The ``notebook-accel`` command line: ``config``, ``env``, ``launch`` and ``test``.

Exit codes: 0 success, 2 a usage or config error (one message on stderr, no traceback), 1 a failed run,
130 interrupted. Run ``notebook-accel <command> --help`` for each command's options, or
``python -m notebook_accel.cli`` where the console script is not on ``PATH``.
"""

from __future__ import annotations

from notebook_accel.cli.app import main

__all__ = ["main"]
