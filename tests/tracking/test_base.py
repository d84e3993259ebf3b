"""Tests for notebook_accel.tracking.base: scalar conversion, one-time warnings, the blank tracker."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from notebook_accel.errors import NotebookAccelError
from notebook_accel.tracking.base import (
    GeneralTracker,
    TrackerError,
    TrackerUnavailableError,
    scalar_values,
    warn_skipped,
)


def test_scalars_are_kept_as_floats_and_the_rest_named() -> None:
    values = {
        "int": 3,
        "float": 0.5,
        "tensor0d": torch.tensor(2.5),
        "numpy": np.float32(1.5),
        "nan": float("nan"),
        "bool": True,
        "text": "hi",
        "vector": torch.ones(3),
        "one_element_1d": torch.ones(1),
        "list": [1.0],
    }
    scalars, skipped = scalar_values(values)
    assert scalars["int"] == 3.0 and type(scalars["int"]) is float
    assert scalars["float"] == 0.5
    assert scalars["tensor0d"] == 2.5
    assert scalars["numpy"] == 1.5
    assert scalars["nan"] != scalars["nan"]
    assert set(skipped) == {"bool", "text", "vector", "one_element_1d", "list"}


def test_warn_skipped_warns_once_per_name() -> None:
    seen: set[str] = set()
    with pytest.warns(UserWarning, match=r"skipped \['a'\]"):
        warn_skipped("jsonl", ["a"], seen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_skipped("jsonl", ["a"], seen)  # no second warning
    with pytest.warns(UserWarning, match=r"\['b'\]"):
        warn_skipped("jsonl", ["a", "b"], seen)


def test_blank_tracker_does_nothing() -> None:
    blank = GeneralTracker(_blank=True)
    blank.start()
    blank.store_init_configuration({"lr": 1})
    blank.log({"loss": 1.0}, step=1)
    blank.finish()
    assert blank.tracker is None
    assert "blank" in repr(blank)


def test_error_types_subclass_the_natural_builtins() -> None:
    assert issubclass(TrackerError, NotebookAccelError) and issubclass(TrackerError, ValueError)
    assert issubclass(TrackerUnavailableError, NotebookAccelError) and issubclass(TrackerUnavailableError, ImportError)
