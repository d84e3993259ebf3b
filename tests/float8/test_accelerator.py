"""One process: ``Accelerator(mixed_precision="fp8")`` converts, trains, refuses clearly, saves and resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from notebook_accel import Accelerator, AORecipeKwargs
from notebook_accel.float8 import recipe
from notebook_accel.float8.convert import float8_module_names
from notebook_accel.plugins import ConfigurationError
from tests.float8.conftest import needs_torchao
from tests.float8.workers import TinyTransformer, _data

CONVERTED = ["blocks.0.proj", "blocks.0.mlp.0", "blocks.0.mlp.2", "blocks.1.qkv", "blocks.1.proj", "blocks.1.mlp.0",
             "blocks.1.mlp.2"]  # every Linear but the first (blocks.0.qkv) and the last (head)


def emulation(**options: Any) -> AORecipeKwargs:
    from torchao.float8 import Float8LinearConfig

    return AORecipeKwargs(config=Float8LinearConfig(emulate=True, **options))


def steps(accelerator: Accelerator, model: torch.nn.Module, optimizer: Any, count: int, start: int = 0) -> list[float]:
    """``count`` optimizer steps on fixed batches; the losses."""
    tokens, targets = _data()[:]
    out = []
    for i in range(start, start + count):
        loss = F.cross_entropy(model(tokens[8 * i:8 * i + 8]).flatten(0, 1), targets[8 * i:8 * i + 8].flatten())
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        out.append(loss.item())
    return out


def fresh(seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer()


@needs_torchao
def test_emulated_fp8_converts_all_but_the_edges_and_returns_fp32() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()])
    assert accelerator.mixed_precision == "fp8" and accelerator.fp8_backend == "AO"
    assert Accelerator(mixed_precision="bf16").fp8_backend == "NO"
    model = accelerator.prepare(fresh())
    assert float8_module_names(model) == CONVERTED
    assert model(_data()[:2][0]).dtype == torch.float32  # the forward ran under bf16 autocast, cast back
    with accelerator.autocast():
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16


@needs_torchao
def test_the_launch_configs_fp8_options_reach_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_MIXED_PRECISION", "fp8")
    monkeypatch.setenv("NOTEBOOK_ACCEL_FP8", '{"emulate": true, "pad_inner_dim": false}')
    accelerator = Accelerator()
    model = accelerator.prepare(fresh())
    assert float8_module_names(model) == CONVERTED
    config = model.blocks[1].qkv.config
    assert config.emulate and not config.pad_inner_dim and not config.enable_fsdp_float8_all_gather


@needs_torchao
def test_a_user_filter_chooses_the_layers() -> None:
    handler = emulation()
    handler.module_filter_func = lambda module, fqn: fqn.endswith("mlp.0")
    model = Accelerator(mixed_precision="fp8", kwargs_handlers=[handler]).prepare(fresh())
    assert float8_module_names(model) == ["blocks.0.mlp.0", "blocks.1.mlp.0"]


@needs_torchao
@pytest.mark.parametrize("model_first", [True, False])
def test_replaced_weights_are_trained_in_either_order_of_prepare(model_first: bool) -> None:
    """float8 all-gather gives converted layers new weight parameters: an optimizer built before prepare must
    follow them (without that, the float8 layers never train)."""
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation(enable_fsdp_float8_all_gather=True)])
    model = fresh()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer) if model_first else \
        reversed(accelerator.prepare(optimizer, model))
    before = model.blocks[1].qkv.weight.detach().clone()
    steps(accelerator, model, optimizer, 1)
    assert not torch.equal(before, model.blocks[1].qkv.weight.detach())


@needs_torchao
def test_a_model_converted_already_is_not_converted_again() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()])
    model = accelerator.prepare(fresh())
    again = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()]).prepare(model)
    assert float8_module_names(again) == CONVERTED


@needs_torchao
def test_a_model_with_nothing_to_convert_warns() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()])
    with pytest.warns(UserWarning, match="no Linear layer of Sequential was converted"):
        accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)))


def test_fp8_on_the_cpu_without_emulation_is_refused_naming_the_way_out() -> None:
    if not recipe.torchao_installed():
        pytest.skip("without torchao the refusal names torchao first (tested below)")
    with pytest.raises(ConfigurationError, match=r"compute capability >= 8\.9.*uses the CPU.*emulate"):
        Accelerator(mixed_precision="fp8")


def test_fp8_without_torchao_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recipe, "torchao_installed", lambda: False)
    with pytest.raises(ConfigurationError, match=r"needs torchao.*notebook-accel\[fp8\]"):
        Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Accelerator(mixed_precision="bf16", kwargs_handlers=[AORecipeKwargs()]), "mixed_precision='bf16'"),
    (lambda: AORecipeKwargs(module_filter_func=5), "expected a function"),
    (lambda: AORecipeKwargs(pad_inner_dim="yes"), "pad_inner_dim"),
    (lambda: Accelerator(kwargs_handlers=[AORecipeKwargs(), AORecipeKwargs()]), "two AORecipeKwargs"),
])
def test_bad_fp8_options_are_refused(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


@needs_torchao
def test_a_config_that_is_not_torchaos_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="expected a torchao"):
        Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(config={"emulate": True})])


@needs_torchao
def test_save_state_and_load_state_resume_exactly(tmp_path: Path) -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()], project_dir=str(tmp_path))
    model = fresh()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=3e-3))
    steps(accelerator, model, optimizer, 3)
    folder = accelerator.save_state(str(tmp_path / "ckpt"))
    expected = steps(accelerator, model, optimizer, 3, start=3)

    again = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation()], project_dir=str(tmp_path))
    other = fresh(seed=1)  # different weights: everything must come from the checkpoint
    other, other_optimizer = again.prepare(other, torch.optim.AdamW(other.parameters(), lr=3e-3))
    again.load_state(folder)
    assert steps(again, other, other_optimizer, 3, start=3) == expected


@needs_torchao
def test_save_model_writes_ordinary_full_precision_weights(tmp_path: Path) -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[emulation(enable_fsdp_float8_all_gather=True)])
    model = fresh()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    steps(accelerator, model, optimizer, 1)
    accelerator.save_model(model, tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    plain = TinyTransformer()
    assert weights.keys() == plain.state_dict().keys()
    assert all(type(t) is torch.Tensor and t.dtype == torch.float32 for t in weights.values())
    plain.load_state_dict(weights)  # a model without torchao takes them as they are
    tokens = _data()[:4][0]
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the high-precision model computes what fp8 approximates
        expected = plain(tokens).float()
    torch.testing.assert_close(model(tokens), expected, rtol=0.1, atol=0.1)
