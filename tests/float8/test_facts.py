"""What fp8 needs, decided without torch or torchao: each missing piece named, emulation lifting the device rule."""

from __future__ import annotations

import pytest

from notebook_accel.float8 import FP8_LABEL, fp8_problems, precision_label


def test_a_capable_gpu_or_emulation_with_torchao_and_ddp_or_fsdp_has_no_problem() -> None:
    assert fp8_problems(emulate=False, engine="DDP", capabilities=[(9, 0), (8, 9)], torchao=True) == []
    assert fp8_problems(emulate=False, engine="FSDP", capabilities=[(10, 0)], torchao=True) == []
    assert fp8_problems(emulate=True, engine="FSDP", capabilities=None, torchao=True) == []
    assert fp8_problems(emulate=True, engine="DDP", capabilities=[(7, 0)], torchao=True) == []


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"capabilities": None}, ["compute capability >= 8.9", "uses the CPU", "emulate: true", "emulate=True"]),
    ({"capabilities": [(9, 0), (8, 0)]}, ["GPUs have 8.0", "mixed_precision='bf16'", "emulate"]),
    ({"capabilities": [None]}, ["GPUs have unknown"]),
    ({"capabilities": [(9, 0)], "engine": "DEEPSPEED"}, ["engine is DEEPSPEED", "DDP or FSDP", "bf16"]),
    ({"capabilities": [(9, 0)], "torchao": False}, ["needs torchao", "notebook-accel[fp8]"]),
])
def test_each_missing_piece_is_named_with_its_fix(kwargs: dict[str, object], words: list[str]) -> None:
    given: dict[str, object] = {"emulate": False, "engine": "DDP", "torchao": True, **kwargs}
    problems = fp8_problems(**given)  # type: ignore[arg-type]
    assert len(problems) == 1
    for word in words:
        assert word in problems[0]


def test_several_missing_pieces_are_all_named() -> None:
    problems = fp8_problems(emulate=False, engine="DEEPSPEED", capabilities=None, torchao=False)
    assert len(problems) == 3


def test_the_header_names_torchao_for_fp8_only() -> None:
    assert precision_label("fp8") == FP8_LABEL == "fp8 (torchao)"
    assert precision_label("bf16") == "bf16" and precision_label("no") == "no"
