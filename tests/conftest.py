"""Fixtures shared by the whole suite.

Every test is checked, after it ends, for what it left behind: child processes, changed environment
variables, or an initialised torch.distributed process group. A leak fails the test that caused it, not
a later one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.helpers import child_pids, free_port

# Keep the user's own config files (ours and accelerate's) out of the tests: point the lookup folders at an
# empty place for the whole session, before any test takes its environment snapshot.
_ISOLATED_HOME = tempfile.mkdtemp(prefix="notebook-accel-tests-")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_ISOLATED_HOME, "config")
os.environ["HF_HOME"] = os.path.join(_ISOLATED_HOME, "hf")
os.environ.pop("NOTEBOOK_ACCEL_CONFIG_FILE", None)
# Launches keep every rank's output in a run folder: the tests' go to the same temporary place, not ./runs.
os.environ["NOTEBOOK_ACCEL_LOG_DIR"] = os.path.join(_ISOLATED_HOME, "runs")
# The processes the suite starts (kernels, the notebooks' kernels, Ray's nodes) skip a 4.3 s grammar compile at
# import: see tests/fast_imports/rfc3987_syntax. Without it a local Ray head misses its agents' fixed 15 s start.
_FAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_imports")
if _FAST not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_FAST, os.environ.get("PYTHONPATH", "")) if p)


_IGNORED_VARS = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}  # torch sets the latter on first optimizer use


def _environ() -> dict[str, str]:
    """The environment, less the variables pytest itself changes during a test."""
    return {k: v for k, v in os.environ.items() if k not in _IGNORED_VARS}


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    """Fail a test that leaves child processes, environment changes or a process group behind."""
    env_before = _environ()
    children_before = set(child_pids())
    yield
    problems: list[str] = []
    deadline = time.monotonic() + 5.0
    leaked = set(child_pids()) - children_before
    while leaked and time.monotonic() < deadline:  # a reaped child can take a moment to vanish from /proc
        time.sleep(0.05)
        leaked = set(child_pids()) - children_before
    if leaked:
        problems.append(f"child processes left running: {sorted(leaked)}")
    env_after = _environ()
    if env_after != env_before:
        changed = sorted(k for k in set(env_before) | set(env_after) if env_before.get(k) != env_after.get(k))
        for name in changed:
            if name in env_before:
                os.environ[name] = env_before[name]
            else:
                os.environ.pop(name, None)
        problems.append(f"environment variables changed: {changed}")
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        problems.append("a torch.distributed process group was left initialised")
    if problems:
        pytest.fail("test leaked: " + "; ".join(problems))


@pytest.fixture
def port() -> int:
    """A free TCP port on 127.0.0.1."""
    return free_port()


@pytest.fixture
def shell() -> Iterator[object]:
    """A real IPython shell in this process (as in a kernel), removed afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    instance = InteractiveShell.instance()
    try:
        yield instance
    finally:
        InteractiveShell.clear_instance()
