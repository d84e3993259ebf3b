#!/usr/bin/env python3
"""The demo (``python3 dev.py demo``): run the quickstart notebook headless and show what it produced.

Executes ``notebooks/01_quickstart.ipynb`` top to bottom in a fresh Jupyter kernel (two worker processes forked
from it train a digits classifier), writes the executed notebook to ``build/demo/01_quickstart.ipynb`` and an HTML
export next to it, then prints the final metrics (read from the notebook's cell tagged ``metrics``) and where the
files are. The committed notebook is left untouched.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from execute_notebooks import ROOT, execute  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "01_quickstart.ipynb"
OUT_DIR = ROOT / "build" / "demo"


def metrics_of(nb: nbformat.NotebookNode) -> dict[str, object]:
    """The value shown by the code cell tagged ``metrics`` (a dict literal in its ``text/plain`` output).

    Raises:
        LookupError: no such cell, or it has no result output.
    """
    for cell in nb.cells:
        if cell.cell_type == "code" and "metrics" in cell.metadata.get("tags", []):
            for output in cell.get("outputs", []):
                text = output.get("data", {}).get("text/plain")
                if output.get("output_type") == "execute_result" and text:
                    return dict(ast.literal_eval(text))
            raise LookupError("the cell tagged 'metrics' has no result; did the notebook run to the end?")
    raise LookupError(f"{NOTEBOOK.name} has no code cell tagged 'metrics'")


def export_html(notebook: Path, target: Path) -> None:
    """Write ``notebook`` as a standalone HTML page (outputs, images and the static dashboard snapshot included)."""
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(notebook, as_version=4))
    target.write_text(body, encoding="utf-8")


def main() -> int:
    """Run the quickstart, export it, print its metrics and the paths; exit 1 if the notebook failed."""
    executed = OUT_DIR / NOTEBOOK.name
    html = executed.with_suffix(".html")
    print(f"[demo] running {NOTEBOOK.relative_to(ROOT)} in a fresh kernel (2 worker processes) ...", flush=True)
    started = time.monotonic()
    try:
        execute(NOTEBOOK, output=executed)
    except Exception as e:  # noqa: BLE001 - any failure: say where the partial notebook is, then fail
        print(f"[demo] the notebook failed: {type(e).__name__}: {str(e).strip()[-2000:]}", file=sys.stderr)
        print(f"[demo] the partially executed notebook is in {ROOT / 'build' / 'failed' / NOTEBOOK.name}")
        return 1
    export_html(executed, html)
    print(f"[demo] done in {time.monotonic() - started:.1f} s")
    for name, value in metrics_of(nbformat.read(executed, as_version=4)).items():
        print(f"[demo]   {name}: {value}")
    print(f"[demo] executed notebook: {executed}")
    print(f"[demo] HTML export:       {html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
