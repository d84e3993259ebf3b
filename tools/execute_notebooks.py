#!/usr/bin/env python3
"""Execute the tutorial notebooks in a real Jupyter kernel and save them with their outputs.

Each notebook runs top to bottom in a fresh kernel of *this* interpreter (not whatever ``python3`` kernel the
machine has registered), with ``notebooks/`` as its working directory, exactly as nbval runs it. Cells marked
``# NBVAL_RAISES_EXCEPTION`` may fail (they are tagged ``raises-exception`` for nbclient during the run only: a
committed notebook with both the comment and the tag makes nbval warn); any other failing cell fails the notebook.

A notebook that executes cleanly is written back in place. One that fails is **not** written over the committed
copy: it goes to ``build/failed/<name>.ipynb`` for inspection, and the script carries on with the next notebook
and exits 1 at the end.

Usage::

    python tools/execute_notebooks.py                       # every notebook in notebooks/
    python tools/execute_notebooks.py 04 notebooks/05_config_picker.ipynb   # some (a number prefix is enough)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
FAILED = ROOT / "build" / "failed"
KERNEL_LOGS = ROOT / "build" / "kernel-logs"
RAISES_MARKER = "# NBVAL_RAISES_EXCEPTION"
RAISES_TAG = "raises-exception"
# Ray's node agents (tutorial 09 starts a local Ray cluster) import for seconds; on a loaded machine the raylet gave
# up on its metrics agent after its default wait ("Timed out waiting for file .../metrics_agent_port_...", then
# "The current node timed out during startup"): the kernel, and the Ray processes it starts, wait longer
RAY_PATIENCE = {"RAY_agent_register_timeout_ms": "300000", "RAY_USAGE_STATS_ENABLED": "0"}


class _ThisInterpreterSpecs(KernelSpecManager):
    """Every kernel name resolves to an ipykernel running on this interpreter (``sys.executable``)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        """The ipykernel spec of this interpreter, whatever name the notebook asks for."""
        return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())


def tag_marked_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """Tag every code cell marked ``# NBVAL_RAISES_EXCEPTION`` (and not tagged yet) for nbclient; returns them."""
    tagged = []
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and RAISES_MARKER in cell.source and RAISES_TAG not in tags:
            cell.metadata["tags"] = [*tags, RAISES_TAG]
            tagged.append(cell)
    return tagged


def untag(cells: list[nbformat.NotebookNode]) -> None:
    """Undo :func:`tag_marked_cells` on ``cells``."""
    for cell in cells:
        tags = [tag for tag in cell.metadata["tags"] if tag != RAISES_TAG]
        if tags:
            cell.metadata["tags"] = tags
        else:
            del cell.metadata["tags"]


def execute(notebook: Path, output: Path | None = None, cell_timeout: int = 300) -> float:
    """Run ``notebook`` in a fresh kernel with cwd ``notebooks/`` and write it to ``output`` (default: in place).

    Args:
        notebook: the ``.ipynb`` file to run.
        output: where to write the executed notebook; the parent folder is created.
        cell_timeout: seconds one cell may take before the run is abandoned.

    Returns:
        The wall time in seconds.

    Raises:
        CellExecutionError: a cell not marked ``# NBVAL_RAISES_EXCEPTION`` failed (nothing is written to
            ``output``; the executed copy goes to ``build/failed/``).
        CellTimeoutError, DeadKernelError: a cell hung or the kernel died (the kernel's own stderr is in
            ``build/kernel-logs/<name>.log``).
    """
    nb = nbformat.read(notebook, as_version=4)
    manager = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreterSpecs())
    client = NotebookClient(
        nb,
        km=manager,
        timeout=cell_timeout,
        record_timing=False,  # no timestamps in cell metadata: a re-run gives a small diff
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    tagged = tag_marked_cells(nb)
    started = time.monotonic()
    KERNEL_LOGS.mkdir(parents=True, exist_ok=True)
    # the kernel process's own stderr (its log warnings, a crash message) goes to a file, not the terminal;
    # cell output travels over the kernel protocol and is unaffected
    with open(KERNEL_LOGS / f"{notebook.stem}.log", "w") as kernel_log:
        try:
            client.execute(stderr=kernel_log, env={**os.environ, **RAY_PATIENCE})
        except (CellExecutionError, CellTimeoutError, DeadKernelError):
            untag(tagged)
            FAILED.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, FAILED / notebook.name)
            raise
    untag(tagged)
    nb.metadata.pop("widgets", None)  # the dashboard leaves static outputs: committed notebooks keep no widget state
    target = output or notebook
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return time.monotonic() - started


def resolve(names: list[str]) -> list[Path]:
    """Notebook paths from arguments: paths, names, or number prefixes (``04``); all notebooks when empty.

    Raises:
        SystemExit: a name that matches no notebook (the message lists the notebooks there are).
    """
    every = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not names:
        return every
    chosen: list[Path] = []
    for name in names:
        path = Path(name)
        if path.suffix == ".ipynb" and path.exists():
            chosen.append(path.resolve())
            continue
        matches = [nb for nb in every if nb.name.startswith(Path(name).stem)]
        if not matches:
            known = ", ".join(nb.name for nb in every) or "none"
            raise SystemExit(f"no notebook matches {name!r}; the notebooks are: {known}")
        chosen.extend(matches)
    return chosen


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, else as given."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """Execute the chosen notebooks one after the other; exit 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="paths, names or number prefixes (default: all)")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds per cell (default 300)")
    args = parser.parse_args(argv)
    failed: list[str] = []
    for notebook in resolve(args.notebooks):
        print(f"executing {_shown(notebook)} ...", flush=True)
        try:
            seconds = execute(notebook, cell_timeout=args.cell_timeout)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
            failed.append(notebook.name)
            print(f"  FAILED, kept the committed copy; executed copy in {_shown(FAILED / notebook.name)}")
            print("  " + str(e).strip().replace("\n", "\n  ")[-3000:], flush=True)
            continue
        print(f"  ok in {seconds:.1f} s", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
