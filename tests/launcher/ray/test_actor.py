"""The actor's own refusals, without a cluster: a run whose child cannot set itself up raises the child's reason in
the actor (Ray hands it to the kernel's watch as the run's error), an actor whose CUDA is initialised refuses to fork,
and a kernel without ``cryptography`` is told what to install (issues 43 and 49)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.launcher.placement.ray.actor import RankWorker, WorkerSetupError, require_sealing
from notebook_accel.launcher.placement.remote.rank import RankSetup


@pytest.fixture(scope="module", autouse=True)
def _ray_imported() -> Iterator[None]:
    """``run`` imports Ray, which sets ``RAY_CLIENT_MODE``: import it before any leak check, put it back after."""
    before = dict(os.environ)
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'notebook-accel[ray]'")
    yield
    for name in set(os.environ) - set(before):
        del os.environ[name]
    os.environ.update(before)


def _setup(port: int) -> RankSetup:
    env = LaunchEnvironment(rank=0, local_rank=0, world_size=1, local_world_size=1, master_addr="127.0.0.1",
                            master_port=1, device="cpu", launched=True)
    return RankSetup(env, ("127.0.0.1", port), b"s" * 32, threads=1)


def test_a_child_that_cannot_reach_the_kernel_is_the_runs_error(port: int) -> None:
    with pytest.raises(WorkerSetupError, match="rank 0 could not reach the kernel at 127.0.0.1"):
        RankWorker().run(_setup(port), print, [])  # nothing listens on the port


def test_an_actor_whose_cuda_is_initialised_refuses_to_fork(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    torch = sys.modules["torch"]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(WorkerSetupError, match="CUDA was initialised in the Ray actor itself"):
        RankWorker().run(_setup(port), print, [])


def test_a_kernel_without_cryptography_is_told_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import cryptography... raises ImportError
    with pytest.raises(ImportError, match="which this kernel lacks: pip install 'notebook-accel\\[ray\\]'"):
        require_sealing("this kernel")
