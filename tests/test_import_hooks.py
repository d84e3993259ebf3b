"""``when_imported``: an action on a module now, or right after its import; find_spec alone does not use it up."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from notebook_accel.import_hooks import when_imported


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path with a fresh module ``hooked_mod`` (value = 1); its finders are removed after."""
    (tmp_path / "hooked_mod.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hooked_mod", raising=False)
    finders = list(sys.meta_path)
    yield tmp_path
    sys.meta_path[:] = finders
    sys.modules.pop("hooked_mod", None)


def _record(seen: list[tuple[str, int]]) -> object:
    return lambda module: seen.append((module.__name__, module.value))


def test_the_action_runs_after_the_modules_own_code(module_dir: Path) -> None:
    seen: list[tuple[str, int]] = []
    when_imported("hooked_mod", _record(seen))  # type: ignore[arg-type]
    assert seen == []
    importlib.import_module("hooked_mod")
    assert seen == [("hooked_mod", 1)]  # the module's value already set: it ran after the module
    importlib.import_module("hooked_mod")
    assert seen == [("hooked_mod", 1)]  # once


def test_an_imported_module_gets_the_action_at_once(module_dir: Path) -> None:
    importlib.import_module("hooked_mod")
    seen: list[tuple[str, int]] = []
    undo = when_imported("hooked_mod", _record(seen))  # type: ignore[arg-type]
    assert seen == [("hooked_mod", 1)]
    undo()  # nothing waiting: harmless


def test_a_find_spec_check_does_not_use_the_hook_up(module_dir: Path) -> None:
    seen: list[tuple[str, int]] = []
    when_imported("hooked_mod", _record(seen))  # type: ignore[arg-type]
    assert importlib.util.find_spec("hooked_mod") is not None  # an "is it installed?" check imports nothing
    assert seen == []
    importlib.import_module("hooked_mod")
    assert seen == [("hooked_mod", 1)]


def test_undo_removes_a_waiting_hook(module_dir: Path) -> None:
    seen: list[tuple[str, int]] = []
    undo = when_imported("hooked_mod", _record(seen))  # type: ignore[arg-type]
    undo()
    undo()
    importlib.import_module("hooked_mod")
    assert seen == []


def test_other_modules_import_untouched(module_dir: Path) -> None:
    (module_dir / "other_mod.py").write_text("value = 2\n")
    seen: list[tuple[str, int]] = []
    when_imported("hooked_mod", _record(seen))  # type: ignore[arg-type]
    other = importlib.import_module("other_mod")
    sys.modules.pop("other_mod", None)
    assert isinstance(other, ModuleType) and other.value == 2 and seen == []
