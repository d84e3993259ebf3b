"""A Jupyter server serving one notebook, and headless Chromium to look at it: what the browser tests share.

The server and the browser are the ones test_jupyterlab.py starts (Debian's ``/usr/bin/chromium``, never a
downloaded browser); everything started is stopped and every temporary folder removed when the block ends.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.browser.test_jupyterlab import CHROMIUM, CHROMIUM_ARGS, SHOTS, _start_lab, _stop
from tests.helpers import free_port

__all__ = ["served_notebook"]


def _notebook(path: Path, cells: Sequence[str]) -> None:
    """Write a notebook of code ``cells``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@contextmanager
def served_notebook(cells: Sequence[str], width: int, height: int) -> Iterator[tuple[Any, str]]:
    """Serve ``run.ipynb`` made of ``cells`` and open Chromium at a ``width`` x ``height`` window; yields the
    browser context and the server's address."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="nacc-served-"))
    profile = Path(tempfile.mkdtemp(prefix="nacc-chromium-"))  # a fresh --user-data-dir, outside the served folder
    _notebook(folder / "run.ipynb", cells)
    port = free_port()
    lab = _start_lab(folder, port)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(str(profile), executable_path=str(CHROMIUM),
                                                           args=CHROMIUM_ARGS, viewport={"width": width, "height": height})
            try:
                yield browser, f"http://127.0.0.1:{port}"
            finally:
                browser.close()
    finally:
        _stop(lab)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(profile, ignore_errors=True)
