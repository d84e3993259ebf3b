"""The harness of test_accelerate_scripts: the import rewrite, the call-by-call driver, merging the ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.compat.accelerate_scripts import DRIVER, merge, rewrite

SCRIPT = '''
from accelerate import Accelerator
from accelerate.data_loader import prepare_data_loader
from accelerate.utils.operations import (
    gather,
)
from accelerate.test_utils.testing import assert_exception
import accelerate
import accelerate.utils
import accelerate_extra  # not accelerate: left alone
def f():
    from accelerate.state import PartialState
'''


def test_rewrite_points_only_the_module_paths_at_notebook_accel() -> None:
    assert rewrite(SCRIPT).splitlines()[1:] == [
        "from notebook_accel import Accelerator",
        "from notebook_accel import prepare_data_loader",
        "from notebook_accel.utils import (",
        "    gather,",
        ")",
        "from notebook_accel.test_utils import assert_exception",
        "import notebook_accel as accelerate",
        "import notebook_accel as accelerate; import notebook_accel.utils",
        "import accelerate_extra  # not accelerate: left alone",
        "def f():",
        "    from notebook_accel import PartialState",
    ]


CHECKS = '''
def helper():
    raise ValueError("inner")

def test_fails(flag):
    helper()

def test_passes(state):
    return 1

def main():
    test_passes(object())
    test_fails(True)
    test_fails(flag=False)
    test_passes(None)
    raise RuntimeError("after the checks")
'''


def test_driver_records_every_depth_0_call_and_goes_on(tmp_path: Path) -> None:
    script = tmp_path / "checks.py"
    script.write_text(CHECKS)
    subprocess.run([sys.executable, str(DRIVER), str(script), str(tmp_path)], check=True,
                   env={"RANK": "1", "SCRIPT_DRIVER_SKIP": "nothing"})
    lines = [json.loads(line) for line in (tmp_path / "rank1.jsonl").read_text().splitlines()]
    assert [(e["call"], e["outcome"]) for e in lines] == [
        ("test_passes(state)", "ok"),
        ("test_fails(flag=True)", "ValueError: inner"),
        ("test_fails(flag=False)", "ValueError: inner"),
        ("test_passes(state=None)", "ok"),
        ("main", "RuntimeError: after the checks"),
    ]
    assert lines[1]["where"] == "checks.py:3"


def test_merge_needs_every_rank(tmp_path: Path) -> None:
    def write(rank: int, *entries: tuple[str, str]) -> None:
        (tmp_path / f"rank{rank}.jsonl").write_text(
            "".join(json.dumps({"call": c, "outcome": o, "where": ""}) + "\n" for c, o in entries))

    write(0, ("a()", "ok"), ("b()", "ok"), ("c()", "ok"))
    write(1, ("a()", "ok"), ("b()", "AssertionError: no"))
    assert merge(tmp_path, 2) == {"a()": "ok", "b()": "rank 1: AssertionError: no", "c()": "rank 1: not reached"}
