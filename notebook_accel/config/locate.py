"""Where the config lives when none is passed, and turning what a user passes into a :class:`Config`.

Lookup order for reading (first match wins):

1. ``$NOTEBOOK_ACCEL_CONFIG_FILE``, when set. It is an explicit choice, so a missing file is an error.
2. notebook-accel's own file, ``$XDG_CONFIG_HOME/notebook_accel/config.yaml`` (``~/.config/...`` by
   default), when it exists. ``notebook-accel config`` writes here.
3. accelerate's ``$HF_HOME/accelerate/default_config.yaml`` (``~/.cache/huggingface/...`` by default), when
   it exists, so a user of ``accelerate config`` needs no set-up.
4. none: built-in defaults (one process).

Ours comes before accelerate's because a user who ran ``notebook-accel config`` meant it for notebook-accel;
we never write into accelerate's file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from notebook_accel import environment
from notebook_accel.config.errors import ConfigError
from notebook_accel.config.files import config_file_path
from notebook_accel.config.io import load_config
from notebook_accel.config.schema import Config

__all__ = ["default_config_path", "accelerate_config_path", "find_config_file", "resolve_config"]


def default_config_path() -> Path:
    """Where notebook-accel writes its config: ``$NOTEBOOK_ACCEL_CONFIG_FILE`` if set, else
    ``$XDG_CONFIG_HOME/notebook_accel/config.yaml`` (``~/.config/notebook_accel/config.yaml``).

    Example:
        >>> default_config_path().name
        'config.yaml'
    """
    named = environment.config_file_path()
    if named:
        return Path(os.path.expanduser(named))
    return Path(environment.config_home()) / "notebook_accel" / "config.yaml"


def accelerate_config_path() -> Path:
    """accelerate's default config file, ``$HF_HOME/accelerate/default_config.yaml`` (it may not exist)."""
    return Path(environment.hf_home()) / "accelerate" / "default_config.yaml"


def find_config_file() -> Path | None:
    """The config file to read when none is given (see the module docstring for the order), or ``None``.

    Raises:
        ConfigError: ``$NOTEBOOK_ACCEL_CONFIG_FILE`` names a file that does not exist.
    """
    named = environment.config_file_path()
    if named:
        path = Path(os.path.expanduser(named))
        if not path.is_file():
            raise ConfigError([f"{environment.CONFIG_FILE_VAR}={named!r} names no file; create it with "
                               f"`notebook-accel config`, or unset {environment.CONFIG_FILE_VAR}"], named)
        return path
    for path in (default_config_path(), accelerate_config_path()):
        if path.is_file():
            return path
    return None


def resolve_config(obj: Any = None) -> Config | None:
    """Turn what a user passes as ``config=`` into a :class:`Config`.

    Args:
        obj: a :class:`Config` (returned as is); a path (``str`` or ``os.PathLike``; loaded); an object whose
            ``.config`` is a :class:`Config`, such as the config picker widget; or ``None`` (the default file, see
            the module docstring, or ``None`` when there is none).

    Returns:
        The config, or ``None`` when ``obj`` is ``None`` and no default file exists.

    Raises:
        ConfigError: the file is invalid, or ``obj`` is of a type that cannot give a config.

    Example:
        >>> resolve_config(Config(num_processes=2)).num_processes
        2
    """
    if isinstance(obj, Config):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_config(config_file_path(obj, "config"))
    if obj is None:
        path = find_config_file()
        return None if path is None else load_config(path)
    inner = getattr(obj, "config", None)
    if isinstance(inner, Config):
        return inner
    raise ConfigError([f"config: got {type(obj).__name__}; allowed: a Config, a path to a YAML file, a "
                       "ConfigPicker (or anything whose .config is a Config), or None for the default file"])
