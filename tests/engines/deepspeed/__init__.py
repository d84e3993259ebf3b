"""DeepSpeed tests. ``needs_deepspeed`` skips, with the reason, the ones that run DeepSpeed when it is not installed;
it looks the package up without importing it (importing deepspeed sets environment variables in the test process)."""

from __future__ import annotations

import importlib.util

import pytest

needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install notebook-accel[deepspeed])")
