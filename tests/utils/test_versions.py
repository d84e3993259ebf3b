"""accelerate's version checks: installed distributions and version strings, PEP 440 order, clear errors."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.utils import compare_versions, is_torch_version


def test_torch_version_ignores_the_local_part() -> None:
    release = torch.__version__.split("+")[0]
    assert is_torch_version("==", release) and is_torch_version(">=", "2.2") and not is_torch_version("<", "2.2")


def test_installed_distributions_and_plain_versions() -> None:
    assert compare_versions("torch", ">=", "2.2") and compare_versions("pyyaml", ">", "5")
    assert compare_versions("2.10.0", ">", "2.9.1")  # numbers, not text ("2.10" < "2.9" as strings)
    assert compare_versions("2.0.0rc1", "<", "2.0.0") and compare_versions("1.16.0", "!=", "1.15.0")


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"operation '=>' is not one of >, >=, ==, !=, <=, <"):
        compare_versions("torch", "=>", "2.0")
    with pytest.raises(ValueError, match=r"not an installed distribution, and 'no-such-package-xyz' is not a version"):
        compare_versions("no-such-package-xyz", ">=", "1.0")
    with pytest.raises(ValueError, match=r"is_torch_version: operation '~=' is not one of"):
        is_torch_version("~=", "2.0")
    with pytest.raises(ValueError, match=r"the requirement 'two' is not a version"):
        is_torch_version(">=", "two")
