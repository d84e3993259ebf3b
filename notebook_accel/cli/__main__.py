"""``python -m notebook_accel.cli``: the same as the ``notebook-accel`` console script."""

from __future__ import annotations

from notebook_accel.cli.app import main

if __name__ == "__main__":
    raise SystemExit(main())
