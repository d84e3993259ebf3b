"""accelerate's is_*_available predicates: every name, accelerate's parameters, and truthful answers."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys

import pytest
import torch

import notebook_accel.utils as utils
from notebook_accel.utils import availability
from tests.helpers import import_accelerate


REMOVED_IN_1_16 = {"is_msamp_available", "is_pippy_available", "is_weights_only_available"}


def test_all_55_names_are_exported_from_utils() -> None:
    assert len(availability.AVAILABILITY_NAMES) == 55
    assert set(availability.AVAILABILITY_NAMES) == set(utils._AVAILABILITY)
    for name in availability.AVAILABILITY_NAMES:
        assert getattr(utils, name) is getattr(availability, name)
        assert isinstance(getattr(utils, name)(), bool), name


def test_the_names_are_accelerates_and_take_its_parameters() -> None:
    accelerate_utils = import_accelerate().utils
    theirs = {n for n in dir(accelerate_utils) if n.startswith("is_") and n.endswith("_available")}
    # the three accelerate 1.16 removed stay here, so code written for 1.15 keeps running (the README says so)
    assert theirs | REMOVED_IN_1_16 == set(availability.AVAILABILITY_NAMES) and not theirs & REMOVED_IN_1_16
    for name in sorted(theirs):
        ours = inspect.signature(getattr(availability, name)).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
        for parameter in inspect.signature(getattr(accelerate_utils, name)).parameters:
            assert takes_any or parameter in ours, f"{name} does not take accelerate's {parameter}="


@pytest.mark.parametrize("name", ["transformers", "pytest", "matplotlib", "deepspeed", "datasets", "wandb"])
def test_packages_are_answered_by_whether_they_can_be_imported(name: str) -> None:
    assert getattr(availability, f"is_{name}_available")() is (importlib.util.find_spec(name) is not None)


def test_missing_packages_and_unsupported_devices_are_false() -> None:
    assert availability._installed("nothing", "no_such_module_xyz")() is False
    assert availability._installed("nothing", "no_such_package_xyz.sub")() is False
    assert availability.is_hpu_available(init_hccl=True) is False
    assert availability.is_npu_available(check_device=True) is False
    assert availability.is_torch_xla_available(check_is_tpu=True) is False
    assert availability.is_megatron_lm_available() is False
    assert "CPU and CUDA only" in (availability.is_mlu_available.__doc__ or "")


def test_fp8_follows_torchao() -> None:
    """fp8 trains through torchao's float8 here: available exactly when torchao can be imported."""
    assert availability.is_fp8_available() is (importlib.util.find_spec("torchao") is not None)


def test_devices_follow_torch() -> None:
    assert availability.is_cuda_available() is torch.cuda.is_available()
    assert availability.is_rocm_available() is (torch.version.hip is not None)
    assert availability.is_fp16_available() is True
    assert availability.is_weights_only_available() is True
    if not torch.cuda.is_available():
        assert availability.is_bf16_available() is True


def test_bnb_version_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(availability.importlib.metadata, "version", lambda name: "0.38.1")
    assert availability.is_bnb_available() and availability.is_8bit_bnb_available()
    assert not availability.is_4bit_bnb_available()
    assert availability._release("0.45.1.dev0") == (0, 45, 1) and availability._release("2.1rc1") == (2, 1)


def test_asking_imports_nothing_and_initialises_no_cuda() -> None:
    code = ("import sys, torch; from notebook_accel import utils; "
            "[getattr(utils, n)() for n in utils._AVAILABILITY if 'bnb' not in n]; "
            "print(sorted(m for m in ('wandb', 'transformers', 'datasets', 'deepspeed', 'matplotlib', 'pytest') "
            "if m in sys.modules), torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] False"
