"""Run one of accelerate's example scripts offline: ``python example_driver.py RECORD_DIR SCRIPT [ARGS...]``.

This is what each launched process runs (``torchrun`` / ``notebook-accel launch`` start it on every rank): it
installs :mod:`offline_hub` (tiny local models, data and metric; every forward recorded into ``RECORD_DIR``), then
runs ``SCRIPT`` as ``__main__`` with ``ARGS`` as its command line, exactly as ``python SCRIPT ARGS`` would.
It imports nothing from the test suite, so it behaves the same under accelerate and under notebook_accel.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import offline_hub  # noqa: E402  (found next to this file in the launched process)


def main(record_dir: str, script: str, *args: str) -> None:
    """Install the offline hub, then run ``script`` with ``args`` as ``__main__``."""
    offline_hub.install(record_dir)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    offline_hub.recorded(lambda: runpy.run_path(script, run_name="__main__"))()


if __name__ == "__main__":
    main(*sys.argv[1:])
