"""Importing the core package must load no UI code and touch no CUDA (workers are forked from it)."""

from __future__ import annotations

import subprocess
import sys

import notebook_accel

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
