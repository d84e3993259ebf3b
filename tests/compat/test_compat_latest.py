"""``python3 dev.py compat-latest`` (tools/compat_latest.py): the pin it reads and the tables it prints.

The measuring itself (a scratch environment, accelerate's scripts under two versions) takes minutes and the package
index, so it is run by hand before a bump; these tests check what it reads and how it reports."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import compat_latest  # noqa: E402


def test_the_pin_is_read_and_is_what_the_suite_runs_under() -> None:
    """tests/compat's lists were measured under the pinned accelerate: a different one installed would make them
    wrong without saying so."""
    pin = compat_latest.pinned_version()
    assert pin.count(".") == 2
    try:
        installed = importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("accelerate is not installed (the test extra has it)")
    assert installed == pin, (f"accelerate {installed} is installed but constraints.txt pins {pin}, which "
                              "tests/compat was measured under: reinstall with python3 dev.py test, or measure the "
                              "new one with python3 dev.py compat-latest and bump the pin")


def test_a_missing_pin_says_what_to_add(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n# accelerate==1.0.0 in a comment is no pin\n")
    with pytest.raises(SystemExit, match="add a line 'accelerate==<version>'"):
        compat_latest.pinned_version(constraints)
    constraints.write_text("torch==2.13.0\naccelerate==9.8.7  # measured\n")
    assert compat_latest.pinned_version(constraints) == "9.8.7"


def test_the_call_table_shows_changes_and_new_failures_only() -> None:
    base = {"a.py::same()": "ok", "a.py::fixed()": "rank 0: AssertionError", "a.py::gone()": "ok"}
    new = {"a.py::same()": "ok", "a.py::fixed()": "ok", "a.py::added()": "ok", "a.py::ours_fail()": "ok"}
    ours = {"a.py::same()": "ok", "a.py::fixed()": "ok", "a.py::added()": "ok",
            "a.py::ours_fail()": "rank 1: ImportError | x"}
    table = compat_latest.call_table("1.0", "1.1", base, new, ours, frozenset({"a.py::ours_fail()"}))
    assert table[0] == "| call | accelerate 1.0 | accelerate 1.1 | notebook_accel, 1.1's scripts |"
    rows = {line.split("`")[1]: line for line in table[2:]}
    assert set(rows) == {"a.py::fixed()", "a.py::gone()", "a.py::added()", "a.py::ours_fail()"}
    assert rows["a.py::gone()"] == "| `a.py::gone()` | PASS | - | - |"
    assert rows["a.py::ours_fail()"].endswith(  # no stray '|'; a failure the migration guide explains says so
        "| - | PASS | FAIL: rank 1: ImportError / x (the migration guide explains it) |")


def test_the_name_lines_list_what_a_release_added_and_removed() -> None:
    base = {"names": {"accelerate.utils": ["a", "b"]}, "unexplained": []}
    new = {"names": {"accelerate.utils": ["b", "c"], "accelerate.logging": ["set_verbosity"]},
           "unexplained": ["accelerate.utils.c"]}
    assert compat_latest.name_lines(base, new) == [
        "accelerate.utils: added c; removed a",
        "accelerate.logging: added set_verbosity; removed nothing",
        "neither provided by notebook_accel nor explained in the migration guide: ['accelerate.utils.c']",
    ]
