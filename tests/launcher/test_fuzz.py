"""A seeded fuzzer for ``notebook_launcher``: every call succeeds or raises one of our errors, and leaves nothing.

The values are the ones users and typos produce (wrong types, out of range, huge, NaN, strings for numbers).
After each call: no child process, no new file descriptor, no changed environment variable or signal handler.
The seed is fixed and the number of calls bounded, so a failure here is reproducible from its printed case.
"""

from __future__ import annotations

import gc
import math
import random
import time
from typing import Any

import pytest

from notebook_accel.errors import NotebookAccelError, shown
from notebook_accel.launcher import notebook_launcher
from tests.helpers import add_hostile, child_pids, fuzz_case, process_state
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(300)

SEED = 20261124
CALLS = 400


def answer(*args: Any) -> int:
    """The function every fuzzed launch runs: quick, and its value tells success apart."""
    return 42


# Per parameter: (values that must work, values that must be refused with our error).
HUGE = 10**5000  # no decimal repr in Python 3.11+: an error message that shows it with repr() fails itself

POOLS: dict[str, tuple[list[Any], list[Any]]] = {
    "function": ([answer], [42, None, "answer"]),
    "args": ([(), []], ["abc", 5, None, {"a": 1}, b"xy", HUGE]),
    "num_processes": ([None, 1, 2], [0, -1, 10**12, 10**4000, HUGE, 1.5, "2", True, math.nan]),
    "mixed_precision": ([None, "no", "bf16"], ["fp4", "FP17", 5, "", HUGE]),
    "use_port": ([None, "0", 0], ["abc", -5, 70000, True, 1.5, "", "123456", HUGE]),
    "master_addr": (["127.0.0.1", "localhost"], [None, 5, "", " ", "no-such-host.invalid", "192.0.2.1", HUGE]),
    "gpu_ids": ([None, "all"], ["0", [0], "x", -1, [0, 0], [HUGE]]),
    "timeout": ([None, 60, 3e7], [0, -1, math.nan, math.inf, 10**400, HUGE, "5", True]),
    "gradient_accumulation_steps": ([None, 1, 4], [0, -2, 2.5, "4", HUGE]),
    "num_nodes": ([1], [0, -3, 2, 10**12, "2", 2.0, HUGE]),
    "node_rank": ([0], [1, -1, 10**9, "0", 0.0, HUGE]),
    "dashboard": ([False], ["yes", 3, HUGE]),
    "show_all_ranks": ([False, True], ["no", None, 2, HUGE]),
    "use_cpu": ([None, True, False], ["no", 2, HUGE]),
    "config": ([None], ["/nonexistent/config.yaml", 5, {}, [], HUGE]),
    "rdzv_backend": (["static", "c10d"], ["etcd", 5, "", HUGE]),
    "rdzv_endpoint": (["", "127.0.0.1"], ["host:99999", 5, HUGE]),
    "rdzv_conf": ([None, {}, {"join_timeout": 60}], [{"join_timeout": HUGE}, {"join_timeout": 0}, {"nope": 1}, 5]),
    "rdzv_id": (["none", "run1"], [5, None, HUGE]),
    "max_restarts": ([0, 1], [-1, 101, 1.5, "1", HUGE]),
    "monitor_interval": ([0.1, 5], [0, -1, math.nan, "x"]),
    "log_line_prefix_template": ([None, "[{rank}] "], [5, "{nope}", HUGE, "{rank:>400000000}", "{rank:{rank}}"]),
    "block": ([True, False], ["no", None, 2, HUGE]),
    "concurrent": ([False, True], ["yes", None, 2, HUGE]),
}
add_hostile(POOLS, {"args": ("list",), "rdzv_id": ("long",)})  # where such a value is a valid one


def test_notebook_launcher_fuzz(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "runs"))
    # torch.distributed opens a pipe once per process, the first time the store is served: not a per-call leak
    first = process_state()
    assert notebook_launcher(answer, num_processes=2, dashboard=RecordingSink()) == 42
    after_first = process_state()  # its environment: the first launch imports torch._dynamo in this process
    assert after_first.environ == first.environ, first.leaks(after_first)
    rng = random.Random(SEED)
    outcomes: dict[str, int] = {}
    gc.collect()  # garbage of earlier tests holding a file descriptor must not be collected mid-case (count drops)
    for index in range(CALLS):
        case, bad = fuzz_case(rng, POOLS, always=("function",))
        case.setdefault("dashboard", RecordingSink())
        if case.get("block") is False and case.get("max_restarts") == 1 and not bad:
            bad = ["block=False with max_restarts"]  # refused together (restarts are for blocking runs)
        function = case.pop("function")
        before = process_state()
        given = {k: v for k, v in case.items() if k != "dashboard"}
        label = f"case {index}: notebook_launcher({function!r}, **{shown(given, 300)})"
        try:
            value = notebook_launcher(function, **case)
        except NotebookAccelError as e:
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
            assert bad, f"{label}: good arguments were refused: {e}"
            assert str(e).strip(), f"{label}: empty error message"
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{label}: raised {type(e).__name__} (not one of ours): {e}")
        else:
            outcomes["success"] = outcomes.get("success", 0) + 1
            assert not bad, f"{label}: bad values for {bad} were accepted"
            if case.get("block") is False:  # a background run: its handle gives the value
                value = value.result(timeout=120)
            if function is answer:
                assert value == 42, f"{label}: returned {value!r}"
        assert child_pids() == [], f"{label}: left child processes"
        assert before.leaks(process_state()) == [], label
    print(outcomes)
    assert outcomes.get("success", 0) >= 20 and outcomes.get("LaunchError", 0) >= 50, outcomes


DEBUG_POOLS: dict[str, tuple[list[Any], list[Any]]] = {
    "function": ([answer], [42, None, "answer"]),
    "args": ([(), [], (1, "a")], ["abc", 5, None, b"xy", HUGE]),
    "num_processes": ([1, 2], [0, -1, 10**12, HUGE, 1.5, "2", True, math.nan, None]),
}
add_hostile(DEBUG_POOLS, {"args": ("list",)})


def test_debug_launcher_fuzz(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``debug_launcher`` with hostile values: 42 from rank 0, or our error naming the parameter; nothing left."""
    from notebook_accel import debug_launcher

    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "runs"))
    assert debug_launcher(answer) == 42  # first-use imports (IPython's, torch.distributed's) are no per-call leaks
    rng = random.Random(SEED + 1)
    outcomes: dict[str, int] = {}
    gc.collect()
    for index in range(60):
        case, bad = fuzz_case(rng, DEBUG_POOLS, always=("function",))
        label = f"case {index}: debug_launcher(**{shown(case, 300)})"
        before = process_state()
        try:
            value = debug_launcher(**case)
        except NotebookAccelError as e:
            outcomes["error"] = outcomes.get("error", 0) + 1
            assert bad, f"{label}: good arguments were refused: {e}"
            assert any(name in str(e) for name in bad), f"{label}: the error names none of {bad}: {e}"
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{label}: raised {type(e).__name__} (not one of ours): {e}")
        else:
            outcomes["ok"] = outcomes.get("ok", 0) + 1
            assert not bad and value == 42, f"{label}: returned {value!r} with bad values for {bad}"
        assert before.leaks(process_state()) == [], label
    print(outcomes)
    assert outcomes.get("ok", 0) >= 5 and outcomes.get("error", 0) >= 30, outcomes


def sleeper(seconds: float) -> str:
    """A background run's function that lasts until stopped (or ``seconds`` pass)."""
    import time

    time.sleep(seconds)
    return "slept"


# Timeouts that mean "no limit" (they block until the run ends) and those that come back at once.
BLOCKING = [None, math.inf, 10**12, 1e300, HUGE]
AT_ONCE = [0, 0.01, -1, -math.inf, -(10**30), -HUGE, math.nan, "5", "x" * 100_000, True, [1], {"a": 1}, object(),
           b"1", 1j]


def _handle_call(label: str, call: Any, allowed: tuple[type[BaseException], ...], parameter: str) -> str:
    """One call of a handle's method: its outcome's name; fails on a foreign error, an error not naming
    ``parameter``, or a leak."""
    from notebook_accel.launcher.supervision.background import RunArgumentError

    before = process_state()
    try:
        call()
        outcome = "ok"
    except RunArgumentError as e:
        assert parameter in str(e) and len(str(e)) < 2000, f"{label}: {str(e)[:300]}"
        outcome = "refused"
    except allowed as e:
        assert len(str(e)) < 2000, f"{label}: a {len(str(e))}-character message"
        outcome = type(e).__name__
    except Exception as e:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{label}: raised {type(e).__name__}: {str(e)[:300]}")
    assert before.leaks(process_state(), run_going=label.startswith("running:")) == [], label
    return outcome


def test_background_run_methods_fuzz(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One short real background run; its handle's ``wait``/``result``/``stop`` and display methods given
    hostile values while it runs and after it stopped: a result, ``TimeoutError`` (running) or
    ``RunStoppedError`` (stopped), or a ``RunArgumentError`` naming the parameter; nothing left behind."""
    from notebook_accel.launcher.supervision.background import RunStoppedError

    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "runs"))
    assert notebook_launcher(answer, num_processes=2, dashboard=RecordingSink()) == 42  # first-use imports
    gc.collect()
    rng = random.Random(SEED + 2)
    outcomes: dict[str, int] = {}

    def calls(run: Any, values: list[Any]) -> list[tuple[str, Any, str]]:
        found = [(f"{m}(timeout={shown(v, 40)})", lambda m=m, v=v: getattr(run, m)(timeout=v), "timeout")
                 for m in ("wait", "result") for v in values]
        found += [(f"stop(wait={shown(v, 40)})", lambda v=v: run.stop(wait=v), "wait")
                  for v in [*values, "no", 2] if not isinstance(v, bool) or run.done]
        found += [(f"_repr_mimebundle_(include={shown(v, 40)})", lambda v=v: run._repr_mimebundle_(v, v), "include")
                  for v in values[:5]]
        found += [(name, lambda name=name: getattr(run, name)() if name == "summary" else getattr(run, name),
                   name) for name in ("metrics", "output", "status", "done", "summary")]
        rng.shuffle(found)
        return found

    at_start = process_state()
    run = notebook_launcher(sleeper, args=(120,), num_processes=2, block=False, dashboard=RecordingSink())
    try:
        deadline = time.monotonic() + 60  # the run opens its rank logs as it starts: not a leak of a call below
        while len(list((tmp_path / "runs").glob("*sleeper*/rank*.log"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        for label, call, parameter in calls(run, AT_ONCE):
            if label.startswith("stop("):
                continue  # a valid stop ends the run: phase two
            outcome = _handle_call(f"running: {label}", call, (TimeoutError,), parameter)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert run.status == "running", "a refused or timed-out call changed the run"
        for value in ("no", 2, None, [1]):
            outcome = _handle_call(f"running: stop(wait={value!r})", lambda v=value: run.stop(wait=v), (), "wait")
            assert outcome == "refused", f"stop(wait={value!r}) was accepted"
        assert run.status == "running", "a refused stop stopped the run"
    finally:
        run.stop()
    for label, call, parameter in calls(run, [*AT_ONCE, *BLOCKING]):
        outcome = _handle_call(f"stopped: {label}", call, (RunStoppedError,), parameter)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert run.status == "stopped" and child_pids() == []
    assert at_start.leaks(process_state()) == [], "the run, once stopped, left this behind"  # incl. /proc reads
    print(outcomes)
    assert outcomes.get("refused", 0) >= 30 and outcomes.get("TimeoutError", 0) >= 3, outcomes
