"""Cells meant to fail carry the ``raises-exception`` tag, so JupyterLab's Run All goes on past them."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_failing_cell_is_tagged_for_run_all(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        failed = any(output.get("output_type") == "error" for output in cell.get("outputs", []))
        tagged = "raises-exception" in cell.metadata.get("tags", [])
        assert failed == tagged, f"{path.name} cell {index}: failed={failed} but tagged={tagged}: {cell.source[:80]!r}"
        assert "NBVAL_RAISES_EXCEPTION" not in cell.source, f"{path.name} cell {index}: use the tag, not the comment"
