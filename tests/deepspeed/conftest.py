"""Every DeepSpeed test needs the optional ``deepspeed`` package (``pip install notebook-accel[deepspeed]``)."""

from __future__ import annotations

import importlib.util

import pytest

collect_ignore_glob = [] if importlib.util.find_spec("deepspeed") else ["test_training.py", "test_launch.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip, with the reason, the tests that run DeepSpeed when it is not installed."""
    if importlib.util.find_spec("deepspeed") is None:
        for item in items:
            if "needs_deepspeed" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="deepspeed is not installed (pip install "
                                                        "notebook-accel[deepspeed])"))
