"""The run configuration: a frozen :class:`Config`, its YAML file, and where that file is found.

``load_config`` / ``save_config`` read and write the file (accelerate's files load too); ``resolve_config``
turns a ``config=`` argument (a Config, a path, a picker, or ``None`` for the default file) into a Config.
See :mod:`notebook_accel.config.locate` for the default location and
:mod:`notebook_accel.config.accelerate_keys` for how accelerate settings are treated.
"""

from __future__ import annotations

from notebook_accel.config.errors import ConfigError, ConfigWarning
from notebook_accel.config.io import load_config, save_config
from notebook_accel.config.locate import default_config_path, find_config_file, resolve_config
from notebook_accel.config.schema import Config

__all__ = [
    "Config",
    "ConfigError",
    "ConfigWarning",
    "load_config",
    "save_config",
    "resolve_config",
    "default_config_path",
    "find_config_file",
]
