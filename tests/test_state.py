"""Process state: device choice, backend, distributed type, group creation and its errors, helpers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.state import (
    DistributedType,
    GradientState,
    PartialState,
    ProcessGroupError,
    ProcessHelperError,
    ProcessState,
)


def test_single_process_defaults() -> None:
    state = ProcessState(env=LaunchEnvironment())
    assert state.distributed_type is DistributedType.NO and state.backend is None
    assert (state.process_index, state.num_processes, state.device.type) == (0, 1, "cpu")
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert not state.use_distributed and state.rank == 0
    assert PartialState is ProcessState and "NO" in repr(state)
    state.wait_for_everyone()  # no group: a no-op


def test_cuda_device_from_local_rank_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen: list[Any] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    state = ProcessState(env=LaunchEnvironment(local_rank=1))
    assert state.device == torch.device("cuda", 1) and chosen == [torch.device("cuda", 1)]
    assert ProcessState(cpu=True, env=LaunchEnvironment(local_rank=1)).device.type == "cpu"


def test_launcher_device_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    assert ProcessState(env=LaunchEnvironment(device="cuda:3")).device == torch.device("cuda", 3)
    assert ProcessState(env=LaunchEnvironment(device="cpu")).device.type == "cpu"
    assert ProcessState(env=LaunchEnvironment(device="cuda", local_rank=2)).device == torch.device("cuda", 2)


def test_distributed_without_rendezvous_is_an_error() -> None:
    with pytest.raises(ProcessGroupError, match="MASTER_ADDR/MASTER_PORT are not set"):
        ProcessState(env=LaunchEnvironment(rank=0, world_size=2))


def test_existing_group_of_other_size_is_an_error(port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        env = LaunchEnvironment(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port)
        with pytest.raises(ProcessGroupError, match="already exists with rank 0 of 1"):
            ProcessState(env=env)
    finally:
        dist.destroy_process_group()


def test_split_between_processes() -> None:
    from notebook_accel.state import _split

    assert [_split(list(range(5)), r, 2, False) for r in range(2)] == [[0, 1, 2], [3, 4]]
    assert [_split(list(range(5)), r, 2, True) for r in range(2)] == [[0, 1, 2], [3, 4, 4]]
    assert _split((1, 2, 3), 2, 3, False) == (3,)
    assert _split({"a": [1, 2], "b": [3, 4]}, 1, 2, False) == {"a": [2], "b": [4]}
    assert _split(torch.arange(3), 1, 2, True).tolist() == [2, 2]
    with ProcessState(env=LaunchEnvironment()).split_between_processes([1, 2]) as part:
        assert part == [1, 2]


def test_split_between_processes_takes_a_hugging_face_dataset() -> None:
    datasets = pytest.importorskip("datasets", reason="the datasets package is in the test extra")
    from notebook_accel.state import _split

    table = datasets.Dataset.from_dict({"x": list(range(5)), "y": list("abcde")})
    shares = [_split(table, r, 2, False) for r in range(2)]
    assert all(isinstance(s, datasets.Dataset) for s in shares)
    assert [s["x"] for s in shares] == [[0, 1, 2], [3, 4]] and shares[1]["y"] == ["d", "e"]
    assert _split(table, 1, 2, True)["x"] == [3, 4, 4]
    assert _split(table, 2, 3, True)["x"] == [4, 4]


@pytest.mark.parametrize(("inputs", "match"), [
    ({"a": [1], "b": [1, 2]}, "same length"), (5, "cannot split a int"),
    ({"a": 1}, r"the dict's value 'a': 1 \(int\) cannot be split"),  # was a raw TypeError from len()
    ({"a": torch.tensor(1.0)}, "'a': tensor"), ({"a": "abc"}, "'a': 'abc'"), ({"a": {1, 2}}, "set"),
    (torch.tensor(1.0), "0-dimensional tensor"),  # was a raw TypeError: len() of a 0-d tensor
])
def test_split_between_processes_errors(inputs: Any, match: str) -> None:
    from notebook_accel.state import _split

    with pytest.raises(ProcessHelperError, match=match):
        _split(inputs, 0, 2, False)


def test_decorators_and_print(capsys: pytest.CaptureFixture[str]) -> None:
    state = ProcessState(env=LaunchEnvironment(rank=1, local_rank=0, world_size=1))
    assert state.on_main_process(lambda: 1)() is None  # rank 1 is not the main process
    assert state.on_local_main_process(lambda: 2)() == 2
    assert state.on_process(lambda: 3, process_index=1)() == 3
    assert state.on_process(process_index=0)(lambda: 4)() is None
    with pytest.raises(ProcessHelperError, match="process_index"):
        state.on_process(lambda: 5)
    state.print("hello")
    assert capsys.readouterr().out == "hello\n"
    with state.main_process_first(), state.local_main_process_first():
        pass


def test_gradient_state_without_loaders() -> None:
    gs = GradientState()
    assert gs.sync_gradients and not gs.end_of_dataloader and gs.remainder == -1 and not gs.in_dataloader


_EXIT_SCRIPT = """
import atexit, os, torch.distributed as dist
# registered first, so it runs last: after the Accelerator's own exit hook (one os.write: lines stay whole)
atexit.register(lambda: os.write(1, f"group at exit: {dist.is_initialized()}\\n".encode()))
from notebook_accel import Accelerator
accelerator = Accelerator()
accelerator.wait_for_everyone()
"""


@pytest.mark.timeout(120)
def test_group_created_by_the_accelerator_is_destroyed_at_exit(tmp_path: Any) -> None:
    """Under torchrun the process exits normally: the group we made must be gone before C++ teardown runs."""
    import subprocess
    import sys

    script = tmp_path / "exit_hook.py"
    script.write_text(_EXIT_SCRIPT)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True, text=True, timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("group at exit: False") == 2, result.stdout + result.stderr


def test_the_accelerators_state_names_the_engine_plugins_and_none_without_them() -> None:
    # accelerate's deepspeed_with_config_support example reads accelerator.state.deepspeed_plugin
    from notebook_accel import Accelerator, FullyShardedDataParallelPlugin

    plain = Accelerator(cpu=True).state
    assert (plain.deepspeed_plugin, plain.fsdp_plugin) == (None, None)
    plugin = FullyShardedDataParallelPlugin()
    sharded = Accelerator(cpu=True, fsdp_plugin=plugin).state  # one process trains plainly, keeps the plugin
    assert (sharded.deepspeed_plugin, sharded.fsdp_plugin) == (None, plugin)
