"""Tests for notebook_accel.tracking.hub: routing, the always-on live tracker, main-process-only, errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.events import Metrics
from notebook_accel.tracking import GeneralTracker, JSONLTracker, LiveTracker, TrackerError, TrackerHub
from tests.tracking.conftest import Channel


class Recorder(GeneralTracker):
    """A custom tracker that records every call."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    @property
    def tracker(self) -> list[tuple[str, Any]]:
        return self.calls

    def start(self) -> None:
        self.calls.append(("start", None))

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        self.calls.append(("config", dict(values)))

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(("log", (dict(values), step, kwargs)))

    def finish(self) -> None:
        self.calls.append(("finish", None))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_live_is_fed_before_and_without_init_trackers(live_channel: Channel, tmp_path: Path) -> None:
    hub = TrackerHub(log_with="jsonl", logging_dir=tmp_path, is_main_process=True, rank=0)
    hub.log({"loss": 1.0}, 0, {})  # before init_trackers: only the dashboard sees it
    assert [t.name for t in hub.trackers] == ["live"]
    hub.start("proj", {"lr": 0.1}, {})
    hub.log({"loss": 0.5}, 1, {})
    hub.finish()
    assert [(e.step, e.values) for e in live_channel.drain() if isinstance(e, Metrics)] == [
        (0, {"loss": 1.0}),
        (1, {"loss": 0.5}),
    ]
    assert [line["step"] for line in _jsonl(tmp_path / "proj" / "metrics.jsonl")] == [1]
    assert json.loads((tmp_path / "proj" / "config.json").read_text()) == {"lr": 0.1}


def test_without_a_channel_only_started_trackers_receive(tmp_path: Path) -> None:
    recorder = Recorder()
    hub = TrackerHub(log_with=[recorder, "jsonl"], logging_dir=tmp_path, is_main_process=True, rank=0)
    assert hub.trackers == []
    hub.log({"loss": 1.0}, 0, {})
    hub.start("proj", None, {})
    hub.log({"loss": 0.5}, 1, {"recorder": {"commit": True}})
    hub.finish()
    hub.finish()
    assert [t.name for t in hub.trackers] == ["jsonl", "recorder"]
    assert recorder.calls == [("start", None), ("log", ({"loss": 0.5}, 1, {"commit": True})), ("finish", None)]


def test_only_the_main_process_writes(live_channel: Channel, tmp_path: Path) -> None:
    hub = TrackerHub(log_with=["jsonl", "live"], logging_dir=tmp_path, is_main_process=False, rank=1)
    hub.start("proj", {"lr": 0.1}, {})
    hub.log({"loss": 1.0}, 0, {})
    hub.finish()
    assert hub.trackers == []
    assert not (tmp_path / "proj").exists()
    assert live_channel.drain(timeout=0.3) == []
    blank = hub.get("jsonl")
    assert isinstance(blank, GeneralTracker) and "blank" in repr(blank)
    blank.log({"loss": 1.0})


@pytest.mark.usefixtures("without_package_trackers")
def test_get_returns_trackers_and_unwraps(live_channel: Channel, tmp_path: Path) -> None:
    hub = TrackerHub(log_with="all", logging_dir=tmp_path, is_main_process=True, rank=0)
    hub.start("proj", None, {"tensorboard": {"flush_secs": 1}})
    assert isinstance(hub.get("live"), LiveTracker)
    jsonl = hub.get("jsonl")
    assert isinstance(jsonl, JSONLTracker)
    assert hub.get("jsonl", unwrap=True) is jsonl.tracker
    assert hub.get("live", unwrap=True) is live_channel.writer
    with pytest.raises(TrackerError, match=r"no tracker called 'wandb'.*'jsonl'"):
        hub.get("wandb")
    hub.finish()


def test_get_before_any_tracker_is_blank() -> None:
    hub = TrackerHub(log_with=None, logging_dir=None, is_main_process=True, rank=0)
    assert "blank" in repr(hub.get("jsonl"))


def test_unknown_name_lists_the_allowed_ones() -> None:
    allowed = r"\['all', 'live', 'jsonl', 'tensorboard', 'wandb', 'mlflow', 'comet_ml', 'aim', 'dvclive'\]"
    with pytest.raises(TrackerError, match=rf"unknown tracker 'clearml'.*{allowed}"):
        TrackerHub(log_with=["jsonl", "clearml"], logging_dir="x", is_main_process=True, rank=0)


def test_a_value_that_is_neither_name_nor_tracker_is_refused() -> None:
    with pytest.raises(TrackerError, match=r"log_with got 3 \(int\)"):
        TrackerHub(log_with=[3], logging_dir="x", is_main_process=True, rank=0)  # type: ignore[list-item]


def test_file_trackers_need_a_logging_dir() -> None:
    with pytest.raises(TrackerError, match=r"'jsonl' writes files.*project_dir"):
        TrackerHub(log_with="jsonl", logging_dir=None, is_main_process=True, rank=0)


def test_names_are_case_insensitive_and_deduplicated(tmp_path: Path) -> None:
    hub = TrackerHub(log_with=["JSONL", "jsonl", "Live"], logging_dir=tmp_path, is_main_process=True, rank=0)
    hub.start("proj", None, {})
    assert [t.name for t in hub.trackers] == ["jsonl"]
    hub.finish()
