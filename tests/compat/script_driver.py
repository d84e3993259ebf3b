"""Run one of accelerate's test scripts call by call: ``python script_driver.py SCRIPT RESULTS_DIR``.

The script is imported as a module and its ``main()`` is run, but first every module-level function of the
script is replaced by a recording wrapper. A call that ``main()`` makes directly (depth 0) is run inside a
``try``: its outcome (``ok`` or the exception's one-line text) is appended to ``RESULTS_DIR/rank<r>.jsonl`` at
once and the exception is swallowed, so one failing check does not hide the ones after it. Calls made from
inside another call run unwrapped (their failures belong to the caller). ``main`` itself is recorded last: it
fails when something outside the recorded calls raised (building the Accelerator, ``destroy_process_group``).
``SCRIPT_DRIVER_SKIP`` (comma-separated function names) names calls that are recorded as ``skipped`` and not
run: the baseline uses it for the calls that hang under accelerate on CPU, so the calls after them are counted.

This file runs in the launched processes: it imports nothing from the test suite and works the same under
accelerate and under notebook_accel, which is what makes the two counts comparable.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
import sys
import traceback
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

_SCALARS = (bool, int, float, str, type(None))


def _label(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``name(param=value, other)``: the arguments given, scalars with their value, objects by parameter name.

    Parameter names (not types) keep a call's label the same under both libraries.
    """
    try:
        given = inspect.signature(fn).bind(*args, **kwargs).arguments
    except TypeError:  # a bad call: it will fail when run; label it by position
        given = {f"arg{i}": a for i, a in enumerate(args)} | kwargs
    parts = [f"{k}={v!r}" if isinstance(v, _SCALARS) else k for k, v in given.items()]
    return f"{fn.__name__}({', '.join(parts)})"


def _one_line(exc: BaseException) -> str:
    """The exception as ``Type: first line of the message`` (at most 300 characters)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Recorder:
    """Wraps a script's functions and appends one JSON line per depth-0 call to this rank's results file."""

    def __init__(self, path: Path, skip: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.skip = skip
        self.depth = 0
        self.seen: Counter[str] = Counter()

    def write(self, call: str, outcome: str, where: str = "") -> None:
        """Append one outcome and flush, so a hang or a crash later still leaves what was recorded."""
        with self.path.open("a") as f:
            f.write(json.dumps({"call": call, "outcome": outcome, "where": where}) + "\n")

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` recorded when called at depth 0, passed through untouched deeper down."""

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            label = _label(fn, args, kwargs)
            self.seen[label] += 1
            if self.seen[label] > 1:
                label += f"#{self.seen[label]}"
            if name in self.skip:
                self.write(label, "skipped (SCRIPT_DRIVER_SKIP)")
                return None
            self.depth += 1
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - a skip or a SystemExit is an outcome too
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                self.write(label, _one_line(exc), f"{Path(frame.filename).name}:{frame.lineno}")
                return None
            finally:
                self.depth -= 1
            self.write(label, "ok")
            return result

        return recorded


def load(script: Path) -> ModuleType:
    """Import ``script`` as a module named after its file (its folder goes on ``sys.path``)."""
    sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[script.stem] = module
    spec.loader.exec_module(module)
    return module


def run(script: Path, results: Path) -> None:
    """Import the script, wrap its functions, run its ``main()`` and record every depth-0 call."""
    rank = int(os.environ.get("RANK", "0"))
    skip = frozenset(filter(None, os.environ.get("SCRIPT_DRIVER_SKIP", "").split(",")))
    recorder = Recorder(results / f"rank{rank}.jsonl", skip)
    try:
        module = load(script)
    except BaseException as exc:  # noqa: BLE001
        recorder.write("import", _one_line(exc))
        return
    for name, obj in list(vars(module).items()):
        if inspect.isfunction(obj) and obj.__module__ == module.__name__ and name != "main":
            setattr(module, name, recorder.wrap(name, obj))
    try:
        module.main()
    except BaseException as exc:  # noqa: BLE001
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        recorder.write("main", _one_line(exc), f"{Path(frame.filename).name}:{frame.lineno}")
    else:
        recorder.write("main", "ok")


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
