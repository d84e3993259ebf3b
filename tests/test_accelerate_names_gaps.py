"""The names closed in the third compatibility pass: accelerate's read-only Accelerator settings,
``init_empty_weights``/``init_on_device``, ``synchronize_rng_states``, ``debug_launcher`` and ``AutocastKwargs``.
Collectives run in 2 real processes."""

from __future__ import annotations

import pytest
import torch

from notebook_accel import (
    Accelerator,
    AutocastKwargs,
    DataLoaderConfiguration,
    debug_launcher,
    init_empty_weights,
    init_on_device,
    synchronize_rng_states,
)
from notebook_accel.plugins import ConfigurationError

pytestmark = pytest.mark.timeout(120)


def test_read_only_settings_follow_the_dataloader_config() -> None:
    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(non_blocking=True,
                                                                          use_seedable_sampler=True))
    assert (acc.non_blocking, acc.use_seedable_sampler, acc.dispatch_batches) == (True, True, None)
    assert acc.use_stateful_dataloader is True and acc.should_save_model is True
    assert (acc.multi_device, acc.is_fsdp2, acc.is_composable_parallelism_enabled) == (False, False, False)
    plain = Accelerator(cpu=True)
    assert (plain.non_blocking, plain.use_seedable_sampler) == (False, False)


class Scaled(torch.nn.Parameter):
    """A Parameter subclass, as some libraries define."""


class WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3, 2), requires_grad=False)
        self.scaled = Scaled(torch.ones(2))
        self.register_buffer("mean", torch.full((2,), 7.0))


def test_init_empty_weights_puts_parameters_on_meta_and_keeps_buffers() -> None:
    original = torch.nn.Module.register_parameter
    with init_empty_weights():
        model = WithBuffer()
        big = torch.nn.Linear(20_000, 20_000)  # 1.6 GB of float32, never written
    assert torch.nn.Module.register_parameter is original  # the patch is gone after the block
    assert model.weight.is_meta and model.weight.shape == (3, 2) and model.weight.requires_grad is False
    assert type(model.scaled) is Scaled and model.scaled.is_meta
    assert not model.mean.is_meta and model.mean.tolist() == [7.0, 7.0]  # buffers keep their values
    assert big.weight.is_meta and big.bias.is_meta
    assert not torch.nn.Linear(2, 2).weight.is_meta  # outside the block: real weights again


def test_include_buffers_and_another_device() -> None:
    with init_empty_weights(include_buffers=True):
        model = WithBuffer()
    assert model.mean.is_meta and model.weight.is_meta
    with init_on_device("cpu"):
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.device.type == "cpu" and not layer.weight.is_meta


def test_the_patch_is_undone_when_the_block_raises() -> None:
    original = torch.nn.Module.register_parameter
    with pytest.raises(ValueError, match="inside"), init_empty_weights():
        raise ValueError("inside")
    assert torch.nn.Module.register_parameter is original


def test_autocast_kwargs_in_the_autocast_block() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    layer = torch.nn.Linear(4, 4)
    with acc.autocast():
        assert layer(torch.ones(1, 4)).dtype == torch.bfloat16
    with acc.autocast(autocast_handler=AutocastKwargs(enabled=False)):
        assert layer(torch.ones(1, 4)).dtype == torch.float32
    with acc.autocast(autocast_handler=AutocastKwargs(cache_enabled=False)):
        assert torch.is_autocast_cache_enabled() is False
    assert torch.is_autocast_cache_enabled() is True


def test_autocast_kwargs_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"AutocastKwargs\(enabled='no'\): expected True or False"):
        AutocastKwargs(enabled="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"accelerator.autocast\(autocast_handler=AutocastKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[AutocastKwargs(enabled=False)])


def test_synchronize_rng_states_checks_before_exchanging() -> None:
    with pytest.raises(ValueError, match=r"cannot synchronize \['xla'\].*'torch', 'cuda' and 'generator'"):
        synchronize_rng_states(["torch", "xla"])
    with pytest.raises(ValueError, match="'generator' needs generator="):
        synchronize_rng_states(["generator"])
    before = torch.get_rng_state()
    synchronize_rng_states(["torch"])  # one process: nothing changes
    assert torch.equal(before, torch.get_rng_state())


def draw_after_sync() -> list[tuple[float, float, float]]:
    """Each rank seeds differently, then takes rank 0's states: every rank then draws the same numbers."""
    acc = Accelerator()
    torch.manual_seed(100 + acc.process_index)
    generator = torch.Generator().manual_seed(200 + acc.process_index)
    unsynced = torch.rand(1).item()
    synchronize_rng_states(["torch", "generator"], generator=generator)
    draws = (unsynced, torch.rand(1).item(), torch.rand(1, generator=generator).item())
    return acc.gather_object([draws])  # one entry per rank (gather_object concatenates lists, as accelerate)


def test_debug_launcher_runs_two_cpu_processes_and_states_agree() -> None:
    (rank0, rank1) = debug_launcher(draw_after_sync)
    assert rank0[0] != rank1[0]  # different seeds before
    assert rank0[1:] == rank1[1:]  # rank 0's torch and generator states after
