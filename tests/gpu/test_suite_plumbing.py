"""The GPU suite itself, checked where there is no GPU: ``dev.py test-gpu`` refuses before installing anything,
asks pytest to fail (not skip) without a usable GPU, and the suite's device-agnostic cases pass on the CPU.

These run in the normal suite (they are not marked for a GPU), so the GPU suite cannot rot unseen between the
runs on a lent GPU machine.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.plumbing


def _gpu_env() -> ModuleType:
    """``tools/gpu_env.py`` (tools/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("_tools_gpu_env", ROOT / "tools" / "gpu_env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_gpu_refuses_before_installing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    gpu_env = _gpu_env()
    monkeypatch.setattr(gpu_env, "GPU_VENV", tmp_path / ".venv-gpu")
    monkeypatch.setattr(gpu_env.shutil, "which", lambda name: None)
    assert gpu_env.main([]) == 2
    assert not (tmp_path / ".venv-gpu").exists()
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


def test_a_listed_gpu_runs_pytest_demanding_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_env = _gpu_env()
    monkeypatch.setattr(gpu_env, "ensure_gpu_venv", lambda wheels: Path("/gpu/python"))
    monkeypatch.setattr(gpu_env, "gpu_names", lambda: ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0123)"])
    calls: list[tuple[list[str], dict[str, Any]]] = []
    monkeypatch.setattr(gpu_env.subprocess, "run",
                        lambda cmd, **kw: calls.append((cmd, kw)) or subprocess.CompletedProcess(cmd, 0))
    assert gpu_env.main(["-k", "fp16"]) == 0
    cmd, kw = calls[-1]
    assert cmd[:4] == ["/gpu/python", "-m", "pytest", "tests/gpu"] and cmd[-2:] == ["-k", "fp16"]
    assert kw["env"]["NOTEBOOK_ACCEL_REQUIRE_GPU"] == "1"


def test_gpu_names_reads_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_env = _gpu_env()
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    monkeypatch.setattr(gpu_env.shutil, "which", lambda name: str(smi))
    assert gpu_env.gpu_names() == ["GPU 0: NVIDIA H100 (UUID: GPU-a)", "GPU 1: NVIDIA H100 (UUID: GPU-b)"]


def _outer_env() -> dict[str, str]:
    """This environment without ``dev.py test-gpu --cpu``'s own switch (the child must decide for itself)."""
    return {k: v for k, v in os.environ.items() if k != "NOTEBOOK_ACCEL_GPU_SUITE"}


def _pytest_gpu(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest tests/gpu`` in a new process, as ``dev.py test-gpu`` runs it."""
    return subprocess.run([sys.executable, "-m", "pytest", "tests/gpu", "-o", "addopts=-ra", "-p", "no:cacheprovider",
                           "-m", "not plumbing", *args], cwd=ROOT, env={**_outer_env(), **env},
                          capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(__import__("torch").version.cuda is not None, reason="a CUDA build of torch: the real suite runs")
def test_demanding_the_gpu_without_one_fails_instead_of_skipping() -> None:
    proc = _pytest_gpu({"NOTEBOOK_ACCEL_REQUIRE_GPU": "1"}, "--collect-only", "-q")
    assert proc.returncode != 0
    assert "NOTEBOOK_ACCEL_REQUIRE_GPU=1" in proc.stdout + proc.stderr and "CPU build" in proc.stdout + proc.stderr


@pytest.mark.timeout(900)
def test_device_agnostic_cases_pass_on_the_cpu() -> None:
    proc = _pytest_gpu({"NOTEBOOK_ACCEL_GPU_SUITE": "cpu"})
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail


def _venv(where: Path) -> Path:
    """A bare venv (no pip) that sees its base Python's packages; returns its python."""
    import venv

    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(where)
    return where / "bin" / "python"


def _yaml_from(python: Path) -> subprocess.CompletedProcess[str]:
    """Where ``python`` imports yaml from (a failed process when it cannot)."""
    return subprocess.run([str(python), "-c", "import yaml; print(yaml.__file__)"], capture_output=True, text=True,
                          check=False)


def test_a_venv_made_from_a_venv_sees_the_parent_venvs_packages(tmp_path: Path) -> None:
    """GPU images ship torch inside a venv (``/opt/torch/.venv``); ``system_site_packages`` alone misses it."""
    assert sys.prefix != sys.base_prefix, "the test suite runs in a venv"
    ours = importlib.util.find_spec("yaml")
    assert ours is not None and ours.origin is not None
    gpu_env = _gpu_env()
    python = _venv(tmp_path / "child")
    before = _yaml_from(python)
    gpu_env._see_parent_venv(python)
    after = _yaml_from(python)
    assert after.returncode == 0 and after.stdout.strip() == ours.origin, after.stderr
    if before.returncode == 0:  # the base Python has its own yaml: the .pth must still reach the parent venv's
        assert before.stdout.strip() != ours.origin


def test_a_chain_of_venvs_reaches_the_packages_two_levels_up(tmp_path: Path) -> None:
    """On the GPU image ``.venv-gpu`` is itself made from ``/opt/torch/.venv``; a venv made from it (this test's
    own case, run there) must still reach the packages of the venv at the top of the chain."""
    ours = importlib.util.find_spec("yaml")
    assert ours is not None and ours.origin is not None
    child = _venv(tmp_path / "child")
    _gpu_env()._see_parent_venv(child)
    grandchild = _venv(tmp_path / "grandchild")
    made = subprocess.run([str(child), "-c", "import importlib.util as u, sys; "
                           f"spec = u.spec_from_file_location('g', {str(ROOT / 'tools' / 'gpu_env.py')!r}); "
                           "m = u.module_from_spec(spec); spec.loader.exec_module(m); "
                           f"m._see_parent_venv(__import__('pathlib').Path({str(grandchild)!r}))"],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    found = _yaml_from(grandchild)
    assert found.returncode == 0 and found.stdout.strip() == ours.origin, found.stderr
