#!/usr/bin/env python3
"""Build the tutorial notebooks in ``notebooks/`` from their reviewable sources in ``tools/notebook_src/``.

A source is a Python file in the "percent" format that editors and jupytext understand::

    # %% [markdown]
    # # A title
    # Some text.

    # %%
    print("a code cell")

Markdown cells are the comment lines with ``# `` stripped; ``# %% tags=["metrics"]`` gives a code cell tags.
nbval's markers (``# NBVAL_CHECK_OUTPUT``) are ordinary comments in the code. A cell meant to fail is tagged
``# %% tags=["raises-exception"]``: JupyterLab's *Run All* then goes on past its error, and nbval and nbclient
accept it (the ``# NBVAL_RAISES_EXCEPTION`` comment would stop *Run All*).

Cells get stable ids (``cell-01``, ...) so a rebuild gives a small diff. A rebuild keeps the outputs of every
code cell whose text did not change *only if the whole notebook's code is unchanged* (the outputs of a
notebook are only valid for the code that produced them); otherwise the notebook is written without outputs
and must be executed again with ``tools/execute_notebooks.py``.

Usage::

    python tools/build_notebooks.py            # (re)build every notebook
    python tools/build_notebooks.py --check    # exit 1 if a notebook's cells differ from its source
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tools" / "notebook_src"
NOTEBOOKS = ROOT / "notebooks"
_HEADER = re.compile(r"^# %%(?P<markdown> \[markdown\])?(?:\s+tags=(?P<tags>\[.*\]))?\s*$")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


@dataclass
class SourceCell:
    """One cell read from a source file."""

    kind: Literal["markdown", "code"]
    lines: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The cell's text, without leading or trailing blank lines."""
        body = self.lines
        if self.kind == "markdown":
            body = [_uncomment(line) for line in body]
        return "\n".join(body).strip("\n")


def _uncomment(line: str) -> str:
    """``# text`` -> ``text``; ``#`` and a blank line -> empty, for markdown lines."""
    if line.startswith("# "):
        return line[2:]
    if line.rstrip() in ("#", ""):
        return ""
    raise ValueError(f"markdown line must start with '# ' or be '#', got {line!r}")


def parse_source(path: Path) -> list[SourceCell]:
    """Split a percent-format file into cells.

    Raises:
        ValueError: text before the first ``# %%`` header, a bad tags list, or a markdown line that is not a
            comment (the message names the file and line).
    """
    cells: list[SourceCell] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            tags = json.loads(header["tags"]) if header["tags"] else []
            cells.append(SourceCell("markdown" if header["markdown"] else "code", tags=list(tags)))
            continue
        if not cells:
            if line.strip():
                raise ValueError(f"{path}:{number}: text before the first '# %%' cell header")
            continue
        try:
            if cells[-1].kind == "markdown":
                _uncomment(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: {e}") from e
        cells[-1].lines.append(line)
    return [cell for cell in cells if cell.text]


def build_notebook(cells: list[SourceCell]) -> nbformat.NotebookNode:
    """A fresh notebook (no outputs) with stable cell ids."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(cells, start=1):
        if cell.kind == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.text)
        else:
            new = nbformat.v4.new_code_cell(cell.text)
            if cell.tags:
                new.metadata["tags"] = list(cell.tags)
        new["id"] = f"cell-{index:02d}"
        nb.cells.append(new)
    return nb


def _code_of(nb: nbformat.NotebookNode) -> list[str]:
    """The texts of a notebook's code cells, in order."""
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def _cells_of(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(type, text) of every cell, to compare a notebook with its source."""
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def sources() -> list[Path]:
    """Every notebook source, in tutorial order."""
    return sorted(SOURCES.glob("[0-9][0-9]_*.py"))


def target_of(source: Path) -> Path:
    """``tools/notebook_src/01_x.py`` -> ``notebooks/01_x.ipynb``."""
    return NOTEBOOKS / f"{source.stem}.ipynb"


def build(source: Path) -> str:
    """Write the notebook for ``source``; returns what happened ("unchanged", "kept outputs", "rebuilt")."""
    fresh = build_notebook(parse_source(source))
    target = target_of(source)
    if target.exists():
        old = nbformat.read(target, as_version=4)
        if _cells_of(old) == _cells_of(fresh):
            return "unchanged"
        if _code_of(old) == _code_of(fresh):
            # only markdown changed: keep the code cells (with their outputs) and take the new markdown
            code_cells = iter(cell for cell in old.cells if cell.cell_type == "code")
            fresh.cells = [next(code_cells) if cell.cell_type == "code" else cell for cell in fresh.cells]
            fresh.metadata = old.metadata
            nbformat.write(fresh, target)
            return "kept outputs"
    NOTEBOOKS.mkdir(exist_ok=True)
    nbformat.write(fresh, target)
    return "rebuilt (needs executing)"


def out_of_date() -> list[str]:
    """Names of the notebooks whose cells differ from their sources (or that are missing)."""
    stale: list[str] = []
    for source in sources():
        target = target_of(source)
        fresh = build_notebook(parse_source(source))
        if not target.exists() or _cells_of(nbformat.read(target, as_version=4)) != _cells_of(fresh):
            stale.append(target.name)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Build every notebook, or with ``--check`` report the ones out of date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the notebooks match their sources")
    args = parser.parse_args(argv)
    if args.check:
        stale = out_of_date()
        for name in stale:
            print(f"out of date: notebooks/{name} (run: python tools/build_notebooks.py)")
        return 1 if stale else 0
    for source in sources():
        print(f"notebooks/{target_of(source).name}: {build(source)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
