"""The package type-checks: mypy over notebook_accel/ and widgets/ with the settings in pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_mypy_reports_no_errors(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is part of the test extra: pip install -e '.[test]'")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "MYPY_FORCE_COLOR": "0"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
