"""``python3 dev.py bench --quick``: the headline figures in one command; its smallest form must keep running.

No timing is asserted (the figures of a smoke run mean nothing): the test proves that every benchmark the command
runs still starts, measures and prints its figure lines, so the command cannot rot unnoticed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> ModuleType:
    """Import a script that is not part of the package (dev.py, a benchmark) by its path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_dev_bench_quick_and_smoke_run_the_summary_and_plain_bench_every_script() -> None:
    dev = _load(ROOT / "dev.py", "dev_for_tests")
    summary = str(ROOT / "benchmarks" / "summary.py")
    assert dev.bench_commands("py", ["--quick"]) == [["py", summary, "--quick"]]
    assert dev.bench_commands("py", ["--smoke"]) == [["py", summary, "--smoke"]]
    every = dev.bench_commands("py", [])
    assert ["py", str(ROOT / "benchmarks" / "warm_launch.py")] in every
    assert all(command[1] != summary for command in every)


@pytest.mark.timeout(1200)  # a hang guard only: a loaded 2-core machine takes a few minutes
def test_the_smallest_form_prints_every_figure() -> None:
    for needed in ("jupyter_client", "ipykernel", "psutil"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed (the test extra): the benchmarks start real kernels")
    summary = _load(ROOT / "benchmarks" / "summary.py", "bench_summary_for_tests")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "summary.py"), "--smoke"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=1100)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for part in summary.PARTS:
        assert f"[bench] {part.title}: {part.script}" in out
        section = out.split(f"[bench] {part.title}: {part.script}", 1)[1].split("[bench] ", 1)[0]
        figures = [line for line in section.splitlines()[1:] if line.startswith(part.figures)]
        assert figures, f"{part.script} printed no figure line:\n{out}"
    assert "ratio dashboard / raw:" in out
    assert "1000 calls/s per rank:" in out and "     0 calls/s per rank:" in out
    assert "save ours" in out and "load ours" in out
    absent = summary.missing_peers()
    if absent:  # said, not failed
        assert f"peers not installed, left out: {', '.join(absent)}" in out
