"""A seeded fuzzer for ``Accelerator(...)``: each construction succeeds or raises one of our errors, naming the
argument, and leaves no process group, child process, open descriptor, environment change or signal handler
behind; the seed is fixed and the number of calls bounded (the module's timeout turns a hang into a failure)."""

from __future__ import annotations

import math
import random
import sys
from typing import Any

import pytest

from notebook_accel import Accelerator, DataLoaderConfiguration, ProjectConfiguration
from notebook_accel.errors import NotebookAccelError, shown
from tests.helpers import add_hostile, fuzz_case, process_state

pytestmark = pytest.mark.timeout(120)

SEED = 1124
CALLS = 300

# Per parameter: (values that must work, values that must be refused with our error).
HUGE = 10**5000  # no decimal repr in Python 3.11+: an error message that shows it with repr() fails itself

POOLS: dict[str, tuple[list[Any], list[Any]]] = {
    "device_placement": ([True, False], ["yes", 1, None, HUGE]),
    "split_batches": ([None, False, True], ["no", 2, HUGE]),
    "mixed_precision": ([None, "no", "bf16"], ["fp4", "BF17", 5, True, HUGE]),
    "gradient_accumulation_steps": ([None, 1, 3, HUGE], [0, -1, 2.5, "2", True, math.nan]),  # any count, as accelerate
    "cpu": ([False, True], ["no", 3, None, HUGE]),
    "dataloader_config": ([None, DataLoaderConfiguration()], [{}, "default", 5, HUGE]),
    "rng_types": ([None, ["torch"], ["torch", "generator"]], ["torch", ["numpy-ish"], [5], 3, HUGE]),
    "log_with": ([None], ["no-such-tracker", 5, [object()], HUGE]),
    "project_dir": ([None, "."], [5, b"x", HUGE]),
    "project_config": ([None, ProjectConfiguration()], [{}, "dir", HUGE]),
    "step_scheduler_with_optimizer": ([True, False], ["no", None, HUGE]),
    "kwargs_handlers": ([None, []], [[5], "ddp", [object()], HUGE]),
}
add_hostile(POOLS, {"project_dir": ("long",)})  # any string is a folder name until it is used


def test_accelerator_fuzz(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    outcomes: dict[str, int] = {}
    for index in range(CALLS):
        case, bad = fuzz_case(rng, POOLS)
        before = process_state()
        label = f"case {index}: Accelerator(**{shown(case, 300)})"
        try:
            Accelerator(**case)
        except NotebookAccelError as e:
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
            assert bad, f"{label}: good arguments were refused: {e}"
            assert any(name in str(e) for name in bad), f"{label}: the error does not name {bad}: {e}"
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{label}: raised {type(e).__name__} (not one of ours): {e}")
        else:
            outcomes["success"] = outcomes.get("success", 0) + 1
            assert not bad, f"{label}: bad values for {bad} were accepted"
        assert before.leaks(process_state()) == [], label
        dist = sys.modules.get("torch.distributed")
        assert dist is None or not dist.is_initialized(), f"{label}: left a process group"
    assert outcomes.get("success", 0) >= 20 and sum(outcomes.values()) - outcomes["success"] >= 50, outcomes
