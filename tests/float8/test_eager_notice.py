"""The warning for an fp8 model that runs eagerly on a GPU (the slowdown was measured on an H100)."""

from __future__ import annotations

import warnings

import pytest
import torch

from notebook_accel.float8 import eager_notice
from notebook_accel.float8.eager_notice import EAGER_FP8_MESSAGE, watch_eager_fp8


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))


def _forwards(model: torch.nn.Module, times: int) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
            model(torch.ones(2, 16))
    return [str(w.message) for w in caught]


def test_an_eager_forward_on_a_gpu_warns_once_and_the_hook_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eager_notice, "_runs_on_cuda", lambda module: True)  # the check on a GPU, run on the CPU
    model = _model()
    watch_eager_fp8(model)
    assert _forwards(model, 3) == [EAGER_FP8_MESSAGE]
    assert not model._forward_pre_hooks  # no cost on later steps


def test_on_the_cpu_nothing_is_said_and_the_hook_goes() -> None:
    model = _model()
    watch_eager_fp8(model)
    assert _forwards(model, 2) == []
    assert not model._forward_pre_hooks


def test_a_compiled_model_gets_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eager_notice, "_runs_on_cuda", lambda module: True)
    model = _model()
    compiled = torch.compile(model, backend="eager")  # traced by dynamo: is_compiling() is true in the hook
    watch_eager_fp8(compiled)
    assert _forwards(compiled, 2) == []


def test_the_message_says_what_to_do() -> None:
    assert "torch.compile(model)" in EAGER_FP8_MESSAGE and "mixed_precision='bf16'" in EAGER_FP8_MESSAGE


@pytest.mark.parametrize("emulate", [False, True])
def test_only_real_float8_is_watched(emulate: bool) -> None:
    pytest.importorskip("torchao", reason="torchao is not installed (pip install 'notebook-accel[fp8]')")
    from torchao.float8 import Float8LinearConfig

    from notebook_accel.float8.recipe import Float8Training

    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3)))
    Float8Training(Float8LinearConfig(emulate=emulate)).convert(model)
    assert bool(model._forward_pre_hooks) is not emulate  # emulation is slow by design: nothing to warn about
