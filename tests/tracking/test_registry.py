"""Tests for the built-in tracker table: a missing package names its extra when the Accelerator is built, and
"all" takes exactly the installed ones."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from notebook_accel import Accelerator
from notebook_accel.tracking import TrackerHub, TrackerUnavailableError
from notebook_accel.tracking.registry import TRACKER_NAMES, available_names

EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "comet_ml": "comet", "aim": "aim", "dvclive": "dvclive",
          "tensorboard": "tensorboard"}


def _hide(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``packages`` look uninstalled to ``importlib.util.find_spec``."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in packages else real(name, *a))


@pytest.mark.parametrize("name", sorted(EXTRAS))
def test_a_missing_package_names_its_extra_when_the_accelerator_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    _hide(monkeypatch, name)
    message = rf'log_with={name!r} needs the {name} package.*pip install "notebook-accel\[{EXTRAS[name]}\]"'
    with pytest.raises(TrackerUnavailableError, match=message) as info:
        Accelerator(cpu=True, log_with=[name], project_dir=str(tmp_path))
    assert isinstance(info.value, ImportError)
    assert "restart the kernel" in str(info.value) and "log_with='jsonl'" in str(info.value)


def test_all_takes_the_installed_package_trackers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, *EXTRAS)
    assert available_names() == ["jsonl"]
    monkeypatch.undo()
    _hide(monkeypatch, "aim", "comet_ml")
    installed = [n for n in ("tensorboard", "wandb", "mlflow", "dvclive") if importlib.util.find_spec(n) is not None]
    assert available_names() == ["jsonl", *installed]
    assert TRACKER_NAMES == ("all", "live", "jsonl", "tensorboard", "wandb", "mlflow", "comet_ml", "aim", "dvclive")


def test_all_without_any_package_tracker_starts_jsonl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide(monkeypatch, *EXTRAS)
    hub = TrackerHub(log_with="all", logging_dir=tmp_path, is_main_process=True, rank=0)
    hub.start("demo", None, {})
    assert [t.name for t in hub.trackers] == ["jsonl"]
    hub.finish()
