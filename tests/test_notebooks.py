"""The committed tutorial notebooks: executed top to bottom, without unexpected errors, in sync with their sources.

nbval (``pytest notebooks/``) re-runs the notebooks and compares the cells marked ``# NBVAL_CHECK_OUTPUT``; these
tests check what nbval does not: that the *committed* files carry the outputs of one clean, in-order run (so the
static dashboard snapshots show on a repository page), and that they were built from ``tools/notebook_src``.
"""

from __future__ import annotations

import html
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = [
    "01_quickstart.ipynb",
    "02_from_single_device.ipynb",
    "03_mixed_precision_and_accumulation.ipynb",
    "04_checkpoint_and_resume.ipynb",
    "05_config_picker.ipynb",
    "06_when_things_go_wrong.ipynb",
    "07_train_in_the_background.ipynb",
    "08_sharded_training.ipynb",
    "09_many_machines_with_ray.ipynb",
]


def _load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` (tools/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"_tools_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _raises(cell: nbformat.NotebookNode) -> bool:
    """A cell that is meant to fail: nbval's comment marker or the nbclient/nbval tag."""
    return "# NBVAL_RAISES_EXCEPTION" in cell.source or "raises-exception" in cell.metadata.get("tags", [])


def _code_cells(path: Path) -> list[nbformat.NotebookNode]:
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def test_all_tutorials_are_committed() -> None:
    assert [path.name for path in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_executed_top_to_bottom(path: Path) -> None:
    counts = [cell.execution_count for cell in _code_cells(path)]
    assert None not in counts, f"{path.name}: unexecuted code cells; run tools/execute_notebooks.py {path.stem[:2]}"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: cells not run once, in order: {counts}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_widget_state_and_launch_cells_leave_no_widget_view(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata, f"{path.name}: widget state in the metadata; re-run tools/execute_notebooks.py"
    for number, cell in enumerate(_code_cells(path), start=1):
        if "notebook_launcher(" not in cell.source:
            continue  # the config picker is an interactive widget by design; launch cells leave static results
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert "application/vnd.jupyter.widget-view+json" not in data, f"{path.name}, code cell {number}"
            assert "VBox(children=" not in data.get("text/plain", ""), f"{path.name}, code cell {number}"


def test_html_export_of_the_quickstart_shows_the_static_result() -> None:
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_filename(str(ROOT / "notebooks" / "01_quickstart.ipynb"))
    assert "train: finished in" in page and re.search(r'src="data:image/(png|svg\+xml);base64,', page)
    assert "<details>" in page and "widget-view" not in page and "VBox(children" not in page


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_errors_only_where_expected(path: Path) -> None:
    for number, cell in enumerate(_code_cells(path), start=1):
        errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
        if _raises(cell):
            assert errors, f"{path.name}, code cell {number} is marked to raise but shows no error"
        else:
            assert not errors, f"{path.name}, code cell {number}: {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_checked_cells_have_output(path: Path) -> None:
    for number, cell in enumerate(_code_cells(path), start=1):
        if "# NBVAL_CHECK_OUTPUT" in cell.source:
            assert cell.get("outputs"), f"{path.name}, code cell {number} is checked by nbval but has no output"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INLINE_IMAGE = re.compile(r"data:[\w/+.-]+;base64,[\w/+=]+")
# an absolute path: a "/" that starts no word, URL, tag or relative path, then at least one folder
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/<~-])/(?:[\w.+-]+/)+[\w.+-]*")


def _output_texts(out: dict[str, object]) -> list[str]:
    """Every text a reader sees of one output (its images' base64 left out), without colour codes."""
    found = [str(out.get("evalue", "")), "".join(out.get("text", "")),  # type: ignore[arg-type]
             "\n".join(out.get("traceback", []))]  # type: ignore[arg-type]
    for kind, value in dict(out.get("data", {})).items():  # type: ignore[call-overload]
        if not kind.startswith("image/"):
            found.append(value if isinstance(value, str) else "".join(value) if isinstance(value, list) else str(value))
    return [_INLINE_IMAGE.sub("", html.unescape(_ANSI.sub("", text))) for text in found]


def machine_paths(out: dict[str, object]) -> list[str]:
    """The absolute paths in one output: a temporary folder, a checkout, a virtual environment, a build machine."""
    return sorted({m for text in _output_texts(out) for m in _ABSOLUTE_PATH.findall(text)})


def test_the_path_finder_sees_what_it_must_and_nothing_else() -> None:
    out = {"output_type": "stream", "text": [
        "saved to /tmp/notebook-accel-05-5_epho9i/picked.yaml\n",
        '  File "/tmp/ipykernel_9610/3322873834.py", line 5\n',
        "Failed to load /work/main/.venv/lib/python3.11/site-packages/torchao/_C.so\n",
        "3.20 it/s · 12/30 batches · runs/20261127-080508-train/rank0.log · https://docs.ray.io/en/latest/x.html\n",
        "<div>a</div> <br/> (.venv/bin/python) 1/23 steps/s\n"]}
    assert machine_paths(out) == ["/tmp/ipykernel_9610/3322873834.py", "/tmp/notebook-accel-05-5_epho9i/picked.yaml",
                                  "/work/main/.venv/lib/python3.11/site-packages/torchao/_C.so"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_show_no_path_of_the_machine_that_ran_them(path: Path) -> None:
    """A temporary folder (a new name every run), a checkout, a virtual environment or a build machine's path in a
    committed output is another reader's noise and this machine's detail; the tutorials use relative folders."""
    for number, cell in enumerate(_code_cells(path), start=1):
        for out in cell.get("outputs", []):
            found = machine_paths(out)
            assert not found, f"{path.name}, code cell {number} shows {found}; run tools/execute_notebooks.py"


def test_notebooks_match_their_sources() -> None:
    assert _load_tool("build_notebooks").out_of_date() == []


def test_source_parser_rejects_text_before_first_cell(tmp_path: Path) -> None:
    source = tmp_path / "01_bad.py"
    source.write_text("import os\n# %%\nprint(1)\n")
    with pytest.raises(ValueError, match="before the first"):
        _load_tool("build_notebooks").parse_source(source)


def test_source_parser_rejects_uncommented_markdown(tmp_path: Path) -> None:
    source = tmp_path / "01_bad.py"
    source.write_text("# %% [markdown]\n# Title\nnot a comment\n")
    with pytest.raises(ValueError, match=r"01_bad.py:3"):
        _load_tool("build_notebooks").parse_source(source)


def test_source_parser_builds_cells_with_tags_and_stable_ids(tmp_path: Path) -> None:
    source = tmp_path / "01_ok.py"
    source.write_text('# %% [markdown]\n# Hi\n#\n# there\n\n# %%\n1/0\n\n# %% tags=["metrics"]\n{}\n')
    tool = _load_tool("build_notebooks")
    nb = tool.build_notebook(tool.parse_source(source))
    assert [(cell.cell_type, cell.source) for cell in nb.cells] == [
        ("markdown", "Hi\n\nthere"), ("code", "1/0"), ("code", "{}")
    ]
    assert "tags" not in nb.cells[1].metadata
    assert nb.cells[2].metadata["tags"] == ["metrics"]
    assert [cell["id"] for cell in nb.cells] == ["cell-01", "cell-02", "cell-03"]


def test_marked_cells_are_tagged_only_during_execution() -> None:
    tool = _load_tool("execute_notebooks")
    nb = nbformat.v4.new_notebook()
    marked = nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\n1/0")
    tagged_before = nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\n1/0", metadata={"tags": ["raises-exception"]})
    nb.cells = [marked, tagged_before, nbformat.v4.new_code_cell("1")]
    changed = tool.tag_marked_cells(nb)
    assert changed == [marked] and marked.metadata["tags"] == ["raises-exception"]
    tool.untag(changed)
    assert "tags" not in marked.metadata and tagged_before.metadata["tags"] == ["raises-exception"]


def test_execute_rejects_unknown_notebook_name() -> None:
    with pytest.raises(SystemExit, match="no notebook matches '99'"):
        _load_tool("execute_notebooks").resolve(["99"])


def test_demo_reads_metrics_cell() -> None:
    demo = _load_tool("demo")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("{'accuracy': 0.9}", metadata={"tags": ["metrics"]})
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "{'accuracy': 0.9}"}, execution_count=1)]
    nb.cells.append(cell)
    assert demo.metrics_of(nb) == {"accuracy": 0.9}
    cell.outputs = []
    with pytest.raises(LookupError, match="no result"):
        demo.metrics_of(nb)
