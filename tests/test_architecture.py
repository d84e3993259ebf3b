"""The package keeps its shape (docs/ARCHITECTURE.md): no import cycle, no upward import, no module over 400 lines.

The measurements are ``tools/architecture.py``'s (``python3 tools/architecture.py`` prints them); the first tests
check that the tool itself finds what it claims to, on a small package made here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_architecture_tool", ROOT / "tools" / "architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


arch = _tool()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_tool_finds_a_lazy_cycle_and_an_upward_import_but_not_a_type_checking_one(tmp_path: Path) -> None:
    _write(tmp_path, {
        "notebook_accel/__init__.py": "",
        "notebook_accel/events.py": "def f():\n    from notebook_accel.engines import spec\n",
        "notebook_accel/engines/__init__.py": "",
        "notebook_accel/engines/spec.py": "from notebook_accel import events\n",
        "notebook_accel/engines/other.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                            "    from notebook_accel.launcher import api\n"),
        "notebook_accel/launcher/__init__.py": "",
        "notebook_accel/launcher/api.py": "from ..engines.spec import X\n",
        "widgets/__init__.py": "",
    })
    known = arch.modules(tmp_path)
    assert arch.cycles(sorted(known), arch.module_graph(known)) == [
        ["notebook_accel.engines.spec", "notebook_accel.events"]]
    upward = arch.upward_imports(known)
    assert any(line.startswith("notebook_accel.events (layer 0: events) imports notebook_accel.engines.spec")
               for line in upward), upward
    assert not any("other" in line for line in upward)  # TYPE_CHECKING imports are not run
    assert not any("launcher.api" in line for line in upward)  # launcher -> engines goes down: allowed


def test_the_tool_names_a_unit_no_layer_places(tmp_path: Path) -> None:
    _write(tmp_path, {"notebook_accel/__init__.py": "", "notebook_accel/brand_new.py": "", "widgets/__init__.py": ""})
    assert arch.upward_imports(arch.modules(tmp_path)) == [
        "unit 'brand_new' is in no layer of tools/architecture.py's LAYERS"]


def test_the_tool_finds_a_placement_that_imports_another(tmp_path: Path) -> None:
    placement = "notebook_accel/launcher/placement"
    _write(tmp_path, {
        "notebook_accel/__init__.py": "", "notebook_accel/launcher/__init__.py": "", f"{placement}/__init__.py": "",
        f"{placement}/spawn.py": "",
        f"{placement}/remote/__init__.py": "", f"{placement}/remote/link.py": "",
        f"{placement}/ray/__init__.py": "",
        f"{placement}/ray/actor.py": "from ..remote import link\nfrom notebook_accel.launcher.placement import spawn\n",
        f"{placement}/slurm/__init__.py": "", f"{placement}/slurm/task.py": "from ..ray.actor import X\n",
        "widgets/__init__.py": "",
    })
    assert arch.placement_crossings(arch.modules(tmp_path)) == [
        "notebook_accel.launcher.placement.slurm.task (placement 'slurm') imports "
        "notebook_accel.launcher.placement.ray.actor (placement 'ray')"]


@pytest.fixture(scope="module")
def known() -> dict[str, Path]:
    return arch.modules(ROOT)


def test_no_module_is_over_400_lines(known: dict[str, Path]) -> None:
    sizes = arch.sizes(known)
    assert {name: n for name, n in sizes.items() if n > arch.MAX_LINES} == {}


def test_no_import_cycle_between_modules(known: dict[str, Path]) -> None:
    assert arch.cycles(sorted(known), arch.module_graph(known)) == []


def test_no_import_cycle_between_units_and_no_upward_import(known: dict[str, Path]) -> None:
    graph = arch.unit_graph(known)
    units = sorted({arch.unit(name, known) for name in known})
    assert arch.cycles(units, {u: {b for b, _, _ in links} for u, links in graph.items()}) == []
    assert arch.upward_imports(known) == []


def test_no_placement_imports_another_and_the_shared_folder_imports_none(known: dict[str, Path]) -> None:
    assert arch.placement_crossings(known) == []


def test_no_sink_method_is_found_by_hasattr(known: dict[str, Path]) -> None:
    hooks = ("handle_metrics", "tick", "phase", "attach_stop", "start", "finish")
    found = [f"{name}: {line.strip()}" for name, path in known.items() for line in path.read_text().splitlines()
             if "hasattr(" in line and any(f'"{hook}"' in line for hook in hooks)]
    assert found == []
