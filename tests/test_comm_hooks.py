"""DDP communication hooks from DistributedDataParallelKwargs(comm_hook=, comm_wrapper=, comm_state_option=), on 2
real processes: fp16/bf16 compression gives exactly the half-precision all-reduce, PowerSGD (plain, batched, with
an fp16 wrapper) compresses after its warm-up and still trains; bad options are refused on construction."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from notebook_accel import Accelerator, DistributedDataParallelKwargs, WorkerError, notebook_launcher
from notebook_accel.kwargs_handlers import DDPCommunicationHookType
from notebook_accel.plugins import ConfigurationError
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(180)


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def one_compressed_backward(hook: str) -> dict[str, Any]:
    """One backward of a DDP model with ``hook``, and every rank's local gradients of the same step."""
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook=hook)])
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    plain = copy.deepcopy(model)
    ddp = accelerator.prepare(model)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(accelerator.process_index + 1))
    ddp(x).pow(2).mean().backward()
    plain(x).pow(2).mean().backward()
    return {"ddp": _grads(ddp.module), "local": accelerator.gather_object([_grads(plain)])}


@pytest.mark.parametrize(("hook", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_compression_equals_the_rounded_all_reduce(hook: str, dtype: torch.dtype) -> None:
    if hook == "bf16" and torch.version.cuda is None and torch.version.hip is None:
        with pytest.raises(WorkerError, match="torch refuses bf16 gradient compression here.*use FP16 instead"):
            notebook_launcher(one_compressed_backward, args=(hook,), num_processes=2, dashboard=RecordingSink())
        return
    result = notebook_launcher(one_compressed_backward, args=(hook,), num_processes=2, dashboard=RecordingSink())
    for i, got in enumerate(result["ddp"]):
        rank0, rank1 = (local[i] for local in result["local"])
        # torch's hook: each rank's bucket cast to half and divided by the world size, summed in half, cast back
        expected = (rank0.to(dtype) / 2 + rank1.to(dtype) / 2).to(dtype).float()
        assert torch.equal(got, expected)
        assert not torch.equal(got, (rank0 + rank1) / 2)  # the full-precision mean differs: the hook ran


WIDTH = 32
STEPS = 30
START = 3  # PowerSGD's plain all-reduces before it compresses


def power_sgd_training(hook: str, wrapper: str) -> dict[str, Any]:
    """A linear regression trained with ``hook``; per step: the loss, and how far the DDP gradient is from the
    exact mean of the ranks' local gradients."""
    options = {"matrix_approximation_rank": 1, "start_powerSGD_iter": START}
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(
        comm_hook=hook, comm_wrapper=wrapper, comm_state_option=options)])
    torch.manual_seed(0)
    truth = torch.randn(WIDTH, WIDTH)
    model = torch.nn.Linear(WIDTH, WIDTH)
    plain = copy.deepcopy(model)
    ddp, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(accelerator.process_index + 1)
    losses, distances, bias_distances = [], [], []
    for _ in range(STEPS):
        x = torch.randn(64, WIDTH, generator=generator)
        loss = (ddp(x) - x @ truth).pow(2).sum(1).mean()
        accelerator.backward(loss)
        plain.load_state_dict(ddp.module.state_dict())
        plain.zero_grad()
        (plain(x) - x @ truth).pow(2).sum(1).mean().backward()
        exact, exact_bias = accelerator.reduce([plain.weight.grad, plain.bias.grad], reduction="mean")
        distances.append((ddp.module.weight.grad - exact).abs().max().item())
        bias_distances.append((ddp.module.bias.grad - exact_bias).abs().max().item())
        losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())
        optimizer.step()
        optimizer.zero_grad()
    weights = accelerator.gather_object([ddp.module.weight.detach().clone()])
    return {"losses": losses, "distances": distances, "bias_distances": bias_distances,
            "same_weights": torch.equal(*weights)}


@pytest.mark.parametrize(("hook", "wrapper"), [
    (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.NO),
    ("batched_power_sgd", "no"),
    (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.FP16),
])
def test_power_sgd_compresses_after_its_warm_up_and_trains(hook: Any, wrapper: Any) -> None:
    result = notebook_launcher(power_sgd_training, args=(hook, wrapper), num_processes=2, dashboard=RecordingSink())
    distances, bias_distances = result["distances"], result["bias_distances"]
    rounding = 1e-5 if wrapper == "no" else 1e-2  # the fp16 wrapper sends even the warm-up's all-reduce in fp16
    assert max(distances[:START] + bias_distances[:START]) < rounding  # the first iterations: plain all-reduces
    assert min(distances[START:]) > 1.0  # then a rank-1 approximation of the weight's gradient is sent instead
    if hook == "batched_power_sgd":  # the whole bucket is one square matrix: the bias is approximated too
        assert min(bias_distances[START:]) > 1e-3
    else:  # per tensor: a vector (the bias) is not worth compressing and is all-reduced as it is
        assert max(bias_distances) < rounding
    losses = result["losses"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert result["same_weights"]  # every rank applied the same (approximate) gradient


def test_bad_options_are_refused_when_built() -> None:
    built = DistributedDataParallelKwargs(comm_hook="POWER_SGD", comm_state_option={"warm_start": False})
    assert built.comm_hook is DDPCommunicationHookType.POWER_SGD
    assert built.to_kwargs() == {}  # the hook is registered on the DDP model, not passed to its constructor
    with pytest.raises(ConfigurationError, match=r"comm_hook='fp8'\): allowed: DDPCommunicationHookType.NO, .*"
                                                 r"'batched_power_sgd'"):
        DistributedDataParallelKwargs(comm_hook="fp8")
    with pytest.raises(ConfigurationError, match=r"comm_wrapper=.*allowed: DDPCommunicationHookType.NO, "
                                                 r"DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16 "):
        DistributedDataParallelKwargs(comm_hook="power_sgd", comm_wrapper="power_sgd")
    with pytest.raises(ConfigurationError, match="comm_wrapper=FP16.*comm_hook is NO; pass comm_hook="):
        DistributedDataParallelKwargs(comm_wrapper="fp16")
    with pytest.raises(ConfigurationError, match=r"unknown PowerSGDState options \['rank'\]; allowed: "
                                                 r"matrix_approximation_rank"):
        DistributedDataParallelKwargs(comm_hook="power_sgd", comm_state_option={"rank": 2})
    with pytest.raises(ConfigurationError, match="only PowerSGD has state options, and comm_hook is FP16"):
        DistributedDataParallelKwargs(comm_hook="fp16", comm_state_option={"warm_start": False})
    single = Accelerator(cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(comm_hook="fp16")])
    assert isinstance(single.prepare(torch.nn.Linear(2, 2)), torch.nn.Linear)  # one process: no DDP, no hook
