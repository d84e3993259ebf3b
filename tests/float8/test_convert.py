"""Which layers become float8: torchao's alignment rule, the first and last Linear kept, a user's filter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from notebook_accel.float8.convert import convert_model, default_filter, float8_module_names, is_float8_module
from tests.float8.conftest import needs_torchao


def stack(*widths: int) -> torch.nn.Sequential:
    """Linear layers of the given widths, ReLU between them."""
    layers: list[torch.nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def emulated() -> object:
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(emulate=True)


def test_default_filter_keeps_the_edges_and_unaligned_layers() -> None:
    model = stack(8, 32, 32, 24, 32, 16)  # layers 0..4; layer 2 is 32->24, layer 3 is 24->32
    keep = default_filter(model)
    chosen = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and keep(m, name)]
    assert chosen == ["2"]


@needs_torchao
def test_conversion_swaps_the_chosen_layers_for_float8_ones() -> None:
    model = stack(16, 32, 32, 32, 16)
    names = convert_model(model, emulated(), None)
    assert names == float8_module_names(model) == ["2", "4"]
    assert is_float8_module(model[2]) and not is_float8_module(model[0]) and not is_float8_module(model[6])
    assert type(model[0]) is torch.nn.Linear


@needs_torchao
def test_a_user_filter_replaces_the_edge_rule_but_not_alignment() -> None:
    model = stack(16, 32, 24, 32)
    names = convert_model(model, emulated(), lambda module, fqn: True)
    assert names == ["0"]  # 32->24 and 24->32 are not multiples of 16 in both dimensions


@needs_torchao
def test_nothing_eligible_leaves_the_model_alone() -> None:
    model = stack(16, 32, 16)
    assert convert_model(model, emulated(), None) == [] and float8_module_names(model) == []


def test_a_model_without_linear_layers_has_no_float8_layer() -> None:
    assert float8_module_names(torch.nn.Conv1d(1, 1, 1)) == []


@needs_torchao
def test_converted_layers_compute_close_to_the_originals() -> None:
    torch.manual_seed(0)
    model = stack(16, 64, 64, 16)
    x = torch.randn(8, 16)
    expected = model(x)
    convert_model(model, emulated(), None)
    assert float8_module_names(model) == ["2"]
    torch.testing.assert_close(model(x), expected, rtol=0.1, atol=0.05)  # e4m3: about 2 significant digits
    with pytest.raises(AssertionError):
        torch.testing.assert_close(model(x), expected, rtol=0, atol=1e-6)  # it really is float8 arithmetic


def test_naming_the_float8_layers_of_a_plain_model_does_not_import_torchao() -> None:
    # importing torchao logs "Failed to load <this machine's site-packages>/torchao/..." on a CPU-only torch: a bf16
    # run that only asks which layers are float8 (tutorial 03) must not show it
    code = ("import sys, torch\nfrom notebook_accel.float8.convert import float8_module_names\n"
            "assert float8_module_names(torch.nn.Sequential(torch.nn.Linear(2, 2))) == []\n"
            "print('torchao' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False" and "Failed to load" not in done.stderr, done.stderr
