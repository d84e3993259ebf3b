"""Importing the core package must load no UI code and touch no CUDA (workers are forked from it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import notebook_accel

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys, notebook_accel
from notebook_accel import *  # every public name resolves
ui = [m for m in ("ipywidgets", "IPython.display", "matplotlib") if m in sys.modules]
assert not ui, f"UI modules loaded by the core package: {ui}"
import torch
assert not torch.cuda.is_initialized(), "importing notebook_accel initialised CUDA"
print("ok")
"""


def test_core_import_loads_no_ui_and_no_cuda() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        notebook_accel.does_not_exist  # noqa: B018
    except AttributeError as e:
        assert "does_not_exist" in str(e)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_every_ui_module_imports_from_outside_the_checkout(tmp_path: Path) -> None:
    # widgets/ is installed as notebook_accel.widgets: an import of the folder's own name ("from widgets.x import")
    # works only with the checkout on sys.path, as under pytest, and breaks in a notebook or an installed package
    names = sorted(p.stem for p in (ROOT / "widgets").glob("*.py") if p.stem != "__init__")
    code = "import importlib\n" + "".join(f"importlib.import_module('notebook_accel.widgets.{n}')\n" for n in names)
    result = subprocess.run([sys.executable, "-c", code + "print('ok')"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
