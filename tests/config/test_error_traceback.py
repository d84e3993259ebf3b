"""A config error shown by IPython: the user's line and the message, no frames of the package (nor its path)."""

from __future__ import annotations

import re

import pytest

from notebook_accel.config import Config, ConfigError


def test_ipython_renders_a_config_error_without_the_packages_frames(shell: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Config(num_processes=0)
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(caught.value._render_traceback_()))  # type: ignore[attr-defined]
    assert "Config(num_processes=0)" in text and "num_processes: got 0" in text, text
    assert "schema.py" not in text and "notebook_accel/" not in text, text
