"""The same training code started by torchrun (torch.distributed.run), not by our launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_torchrun_two_processes() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTEBOOK_ACCEL_", "RANK", "WORLD_SIZE"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    # --standalone: torchrun picks its own free port on localhost (no race with a port chosen here)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.distributed.torchrun_entry"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["collectives"]["type"] == "MULTI_CPU" and out["collectives"]["gathered"] == list(range(21))
    assert out["train"]["syncs"] == [False, True, True] and out["train"]["n"] == 2
