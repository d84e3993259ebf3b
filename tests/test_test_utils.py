"""notebook_accel.test_utils: accelerate's test helpers under the same names."""

from __future__ import annotations

import unittest

import numpy as np
import pytest
import torch

from notebook_accel import notebook_launcher
from notebook_accel.test_utils import (
    RegressionDataset,
    RegressionModel,
    are_the_same_tensors,
    assert_exception,
    require_bnb,
    require_multi_gpu,
    torch_device,
)
from tests.launcher.recording import RecordingSink


def test_regression_dataset_is_a_seeded_noisy_line() -> None:
    data, again = RegressionDataset(length=50, seed=3), RegressionDataset(length=50, seed=3)
    assert len(data) == 50 and set(data[0]) == {"x", "y"}
    assert np.array_equal(data.x, again.x) and np.array_equal(data.y, again.y)
    assert data.x.dtype == np.float32 and data.y.dtype == np.float32
    assert np.abs(data.y - (2 * data.x + 3)).max() < 0.5
    assert not np.array_equal(RegressionDataset(length=50, seed=4).x, data.x)


def test_regression_model_is_x_times_a_plus_b(capsys: pytest.CaptureFixture[str]) -> None:
    model = RegressionModel(a=2, b=1)
    assert [n for n, _ in model.named_parameters()] == ["a", "b"]
    assert model(x=torch.tensor([1.0, 3.0])).tolist() == [3.0, 7.0]
    model(torch.tensor([0.0]))
    assert capsys.readouterr().out.count("Model dtype: torch.float32") == 1
    with pytest.raises(TypeError, match="needs x="):
        model()


def test_assert_exception() -> None:
    with assert_exception(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="raised nothing"):
        with assert_exception(ValueError):
            pass
    with pytest.raises(AssertionError, match="expected ValueError, got KeyError"):
        with assert_exception(ValueError):
            raise KeyError("k")
    with pytest.raises(AssertionError, match="expected 'bad' in the ValueError message"):
        with assert_exception(ValueError, "bad"):
            raise ValueError("fine")


def test_device_and_skips() -> None:
    assert torch_device == ("cuda" if torch.cuda.is_available() else "cpu")

    class Case(unittest.TestCase):
        @require_bnb
        def test_bnb(self) -> None:
            pass

        @require_multi_gpu
        def test_gpus(self) -> None:
            pass

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    expected = int(not availability_bnb()) + int(torch.cuda.device_count() < 2)
    assert len(result.skipped) == expected


def availability_bnb() -> bool:
    from notebook_accel.utils import is_bnb_available

    return is_bnb_available()


def same_tensors() -> tuple[bool, bool]:
    """Equal on both ranks, then different on each rank."""
    from notebook_accel import PartialState

    rank = PartialState().process_index
    return are_the_same_tensors(torch.arange(3)), are_the_same_tensors(torch.tensor([rank]))


def test_are_the_same_tensors() -> None:
    assert are_the_same_tensors(torch.ones(2))
    assert notebook_launcher(same_tensors, num_processes=2, dashboard=RecordingSink()) == (True, False)
