"""Model preparation: placement, no double wrapping, unwrap, no_sync outside DDP."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.model import is_prepared, no_sync, prepare_model, unwrap_model
from notebook_accel.kwargs_handlers import DistributedDataParallelKwargs
from notebook_accel.state import ProcessState


def test_single_process_model_is_not_wrapped_and_not_wrapped_twice() -> None:
    state = ProcessState(env=LaunchEnvironment())
    model = torch.nn.Linear(2, 2)
    prepared = prepare_model(model, state, "bf16")
    assert prepared is model and is_prepared(prepared)
    assert prepare_model(prepared, state, "bf16") is prepared
    assert prepared(torch.ones(1, 2)).dtype == torch.float32
    assert unwrap_model(prepared) is model
    unwrap_model(prepared, keep_fp32_wrapper=False)
    assert "forward" not in model.__dict__
    with no_sync(prepared):
        pass


def test_unwrap_compiled_like_wrapper() -> None:
    inner = torch.nn.Linear(1, 1)

    class Compiled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self._orig_mod = inner

    assert unwrap_model(Compiled()) is inner


class _State:
    """A two-process state on a (mocked) CUDA device, with no process group."""

    num_processes = 2

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)


def test_ddp_wrap_uses_the_cuda_device_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import notebook_accel.model as model_module

    calls: list[dict[str, object]] = []

    class FakeDDP(torch.nn.Module):
        def __init__(self, module: torch.nn.Module, **kwargs: object) -> None:
            super().__init__()
            self.module = module
            calls.append(kwargs)

    monkeypatch.setattr(model_module, "DistributedDataParallel", FakeDDP)
    prepare_model(torch.nn.Linear(1, 1), _State("cuda:1"), device_placement=False,  # type: ignore[arg-type]
                  ddp_kwargs=DistributedDataParallelKwargs(static_graph=True))
    prepare_model(torch.nn.Linear(1, 1), _State("cpu"))  # type: ignore[arg-type]
    assert calls == [{"device_ids": [1], "static_graph": True}, {"device_ids": None}]


def test_multi_gpu_state_with_mocked_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import notebook_accel.state as state_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(state_module, "_init_group", lambda env, backend, kwargs: None)
    state = ProcessState(env=LaunchEnvironment(rank=1, local_rank=1, world_size=2))
    assert (state.distributed_type.value, state.backend, state.device) == ("MULTI_GPU", "nccl", torch.device("cuda", 1))
