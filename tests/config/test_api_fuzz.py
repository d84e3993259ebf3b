"""A seeded fuzzer over the config package's public functions and the config picker's programmatic API: every
parameter given None, huge and negative numbers, NaN, wrong types, very long strings and lists where a scalar
goes. Each call gives its result or a ``ConfigError`` naming the parameter (never a raw TypeError from deep
inside), and leaves no child process, descriptor, environment change or signal handler behind.
"""

from __future__ import annotations

import dataclasses
import math
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.config import Config, ConfigError, load_config, resolve_config, save_config
from notebook_accel.errors import shown
from notebook_accel.hardware import GpuInfo
from tests.helpers import HOSTILE, add_hostile, fuzz_case, process_state

pytestmark = pytest.mark.timeout(120)

HUGE = 10**5000  # no decimal repr: an error message that shows it with repr() fails itself
WRONG_PATHS: list[Any] = [None, 5, HUGE, -1, math.nan, True, b"c.yaml", "", " ", "a\x00b", "x" * 5000, ["c.yaml"]]
GPU = GpuInfo(0, "Fake GPU", 80 << 30, (9, 0))


def _call(label: str, bad: list[str], call: Callable[[], Any]) -> str:
    """Run one fuzzed call: its outcome's name; fails the test on a foreign exception, a refused good case,
    an accepted bad one, an error that names no bad parameter, or a leak."""
    before = process_state()
    try:
        call()
    except ConfigError as e:
        assert bad, f"{label}: good arguments were refused: {e}"
        assert any(name in str(e) for name in bad), f"{label}: the error does not name {bad}: {e}"
        outcome = "error"
    except Exception as e:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{label}: raised {type(e).__name__} (not a ConfigError): {e}")
    else:
        assert not bad, f"{label}: bad values for {bad} were accepted"
        outcome = "ok"
    assert before.leaks(process_state()) == [], label
    return outcome


def test_config_functions_fuzz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NOTEBOOK_ACCEL_CONFIG_FILE", raising=False)
    good_file = save_config(Config(num_processes=2, use_cpu=True), tmp_path / "good.yaml")
    functions: dict[str, tuple[Callable[..., Any], dict[str, tuple[list[Any], list[Any]]]]] = {
        "load_config": (load_config, {"path": ([good_file, str(good_file)], list(WRONG_PATHS))}),
        "save_config": (save_config, {"config": ([Config()], [None, {}, "config.yaml", 5, [Config()]]),
                                      "path": ([tmp_path / "a.yaml", str(tmp_path / "b.json")], list(WRONG_PATHS))}),
        "resolve_config": (resolve_config, {"obj": ([None, Config(), good_file], [5, b"x", "", "a\x00b", HUGE])}),
    }
    for _, pools in functions.values():
        add_hostile(pools, {})
    rng = random.Random(1125)
    outcomes: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index in range(300):
            name = rng.choice(sorted(functions))
            function, pools = functions[name]
            case, bad = fuzz_case(rng, pools, always=tuple(pools))
            bad = ["config" if b == "obj" else b for b in bad]  # resolve_config's obj is what users pass as config=
            label = f"case {index}: {name}(**{shown(case, 300)})"
            outcome = _call(label, bad, lambda: function(**case))
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("ok", 0) >= 30 and outcomes.get("error", 0) >= 100, outcomes


def test_config_fields_fuzz() -> None:
    """Every field of ``Config`` given hostile values: a Config or a ConfigError naming the field."""
    fields = [f.name for f in dataclasses.fields(Config)]
    values = [*HOSTILE.values(), None, HUGE, math.inf, -1, True, "", b"x", ["a"]]
    rng = random.Random(1126)
    outcomes: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index in range(400):
            case = {name: rng.choice(values) for name in rng.sample(fields, rng.choice([1, 1, 2]))}
            label = f"case {index}: Config(**{shown(case, 300)})"
            before = process_state()
            try:
                Config(**case)
                outcomes["ok"] = outcomes.get("ok", 0) + 1
            except ConfigError as e:
                extra = case.get("extra")
                names = [*case, *(map(str, extra) if isinstance(extra, dict) else ())]  # extra's keys are settings
                assert any(name in str(e) for name in names), f"{label}: the error names none of {names}: {e}"
                outcomes["error"] = outcomes.get("error", 0) + 1
            except Exception as e:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{label}: raised {type(e).__name__} (not a ConfigError): {e}")
            assert before.leaks(process_state()) == [], label
    assert outcomes.get("error", 0) >= 300, outcomes


def test_config_picker_fuzz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The picker's constructor and its ``load``/``save`` with hostile values: a picker, or a ConfigError naming
    the parameter."""
    from notebook_accel.widgets.config_picker import ConfigPicker

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    good_file = save_config(Config(use_cpu=True), tmp_path / "good.yaml")
    pools: dict[str, tuple[list[Any], list[Any]]] = {
        "path": ([None, tmp_path / "p.yaml"], WRONG_PATHS[1:]),  # None: the default file
        "cpu_count": ([None, 1, 8], [0, -1, HUGE, 1.5, "4", True, math.nan, [4]]),
        "gpus": ([None, [], [GPU]], [5, "gpu", [0], [None], {"a": 1}, True]),
    }
    add_hostile(pools, {})
    rng = random.Random(1127)
    picker = ConfigPicker(Config(use_cpu=True), path=tmp_path / "p.yaml", cpu_count=4, gpus=[])
    outcomes: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index in range(120):
            verb = rng.choice(["new", "load", "save"])
            if verb == "new":
                case, bad = fuzz_case(rng, pools)
                label = f"case {index}: ConfigPicker(Config(use_cpu=True), **{shown(case, 300)})"
                outcome = _call(label, bad, lambda: ConfigPicker(Config(use_cpu=True), **case))
            else:
                case, bad = fuzz_case(rng, {"path": ([None, good_file], WRONG_PATHS[1:])}, always=("path",))
                label = f"case {index}: picker.{verb}(**{shown(case, 300)})"
                outcome = _call(label, bad, lambda: getattr(picker, verb)(**case))
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("ok", 0) >= 20 and outcomes.get("error", 0) >= 40, outcomes
