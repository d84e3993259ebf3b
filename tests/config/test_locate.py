"""Where the config is found when none is passed, and resolve_config for each kind of argument."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from notebook_accel.config import (
    Config,
    ConfigError,
    default_config_path,
    find_config_file,
    resolve_config,
    save_config,
)
from notebook_accel.config.locate import accelerate_config_path


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Point XDG_CONFIG_HOME and HF_HOME at empty folders; unset NOTEBOOK_ACCEL_CONFIG_FILE."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("NOTEBOOK_ACCEL_CONFIG_FILE", raising=False)
    return tmp_path / "xdg" / "notebook_accel" / "config.yaml", tmp_path / "hf" / "accelerate" / "default_config.yaml"


def test_nothing_found_gives_none(homes: tuple[Path, Path]) -> None:
    ours, theirs = homes
    assert default_config_path() == ours
    assert accelerate_config_path() == theirs
    assert find_config_file() is None
    assert resolve_config(None) is None


def test_accelerate_file_is_used_when_ours_is_missing(homes: tuple[Path, Path]) -> None:
    _, theirs = homes
    save_config(Config(num_processes=2), theirs)
    assert find_config_file() == theirs
    assert resolve_config(None) == Config(num_processes=2)


def test_our_file_wins_over_accelerate(homes: tuple[Path, Path]) -> None:
    ours, theirs = homes
    save_config(Config(num_processes=2), theirs)
    save_config(Config(num_processes=3, use_cpu=True), ours)
    assert find_config_file() == ours
    assert resolve_config(None).num_processes == 3  # type: ignore[union-attr]


def test_environment_variable_wins(homes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, _ = homes
    save_config(Config(num_processes=3, use_cpu=True), ours)
    named = save_config(Config(num_processes=4, use_cpu=True), tmp_path / "elsewhere.yaml")
    monkeypatch.setenv("NOTEBOOK_ACCEL_CONFIG_FILE", str(named))
    assert default_config_path() == named
    assert find_config_file() == named
    assert resolve_config(None).num_processes == 4  # type: ignore[union-attr]


def test_environment_variable_naming_no_file_is_an_error(
    homes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_CONFIG_FILE", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="NOTEBOOK_ACCEL_CONFIG_FILE=.*names no file"):
        resolve_config(None)


def test_default_location_falls_back_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("NOTEBOOK_ACCEL_CONFIG_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_config_path() == tmp_path / ".config" / "notebook_accel" / "config.yaml"


def test_resolve_config_accepts_config_paths_and_pickers(tmp_path: Path) -> None:
    config = Config(num_processes=2, use_cpu=True)
    assert resolve_config(config) is config
    path = save_config(config, tmp_path / "c.yaml")
    assert resolve_config(str(path)) == config
    assert resolve_config(path) == config
    assert resolve_config(SimpleNamespace(config=config)) is config


@pytest.mark.parametrize("bad", [3, {"num_processes": 2}, SimpleNamespace(config="c.yaml"), object()])
def test_resolve_config_rejects_other_types_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match=f"got {type(bad).__name__}; allowed: a Config, a path"):
        resolve_config(bad)


def test_resolve_config_passes_file_errors_on(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config file"):
        resolve_config(tmp_path / "missing.yaml")
