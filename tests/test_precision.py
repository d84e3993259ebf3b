"""Mixed precision: choosing the mode, autocast, the scaler, and the fp32-output forward wrapper."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.kwargs_handlers import GradScalerKwargs
from notebook_accel.plugins import ConfigurationError
from notebook_accel.precision import (
    autocast_context,
    make_scaler,
    resolve_mixed_precision,
    unwrap_forward,
    wrap_forward,
)

CPU = torch.device("cpu")


def test_resolution_order() -> None:
    assert resolve_mixed_precision(None, None) == "no"
    assert resolve_mixed_precision(None, "bf16") == "bf16"
    assert resolve_mixed_precision("FP16", "bf16") == "fp16"


@pytest.mark.parametrize(("value", "launch", "match"), [("fp4", None, "mixed_precision='fp4'"),
                                                        (None, "int8", "launch config"), (16, None, "16")])
def test_bad_mode_lists_choices(value: object, launch: str | None, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        resolve_mixed_precision(value, launch)  # type: ignore[arg-type]
    assert "allowed: no, fp16, bf16, fp8" in str(info.value)


def test_autocast_and_scaler() -> None:
    with autocast_context("bf16", CPU):
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16
    with autocast_context("no", CPU):
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.float32
    assert make_scaler("bf16", CPU, None) is None
    scaler = make_scaler("fp16", CPU, GradScalerKwargs(init_scale=4.0))
    assert scaler.get_scale() == 4.0


def test_fp16_unsupported_device_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no fp16 here")

    monkeypatch.setattr(torch.amp, "GradScaler", refuse)
    with pytest.raises(ConfigurationError, match="use mixed_precision='bf16' or 'no'"):
        make_scaler("fp16", CPU, None)


class _Probe(torch.nn.Module):
    """Records the dtype its linear layer computes in."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.linear(x)
        self.seen.append(out.dtype)
        return {"out": out, "index": torch.tensor([1])}


def test_wrapped_forward_runs_in_autocast_and_returns_fp32() -> None:
    model = _Probe()
    wrap_forward(model, "bf16", CPU)
    wrap_forward(model, "bf16", CPU)  # twice: still one wrapper
    result = model(torch.ones(1, 2))
    assert result["out"].dtype == torch.float32 and result["index"].dtype == torch.int64
    assert model.seen == [torch.bfloat16]
    unwrap_forward(model)
    assert model(torch.ones(1, 2))["out"].dtype == torch.float32 and model.seen[-1] == torch.float32
    wrap_forward(model, "no", CPU)
    assert "forward" not in model.__dict__
