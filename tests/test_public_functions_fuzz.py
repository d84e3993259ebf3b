"""Every public helper function of the package, each parameter given each hostile value (None, a 5,000-digit
number, a huge negative one, NaN, a 100,000-character string, a list, a dict, an object, -1, a word, 1.5):
the call succeeds, or raises our error or the ``TypeError``/``ValueError`` accelerate's function of the same name
raises, whose message names the parameter and stays short; and it leaves nothing behind (process, descriptor,
environment variable, signal handler)."""

from __future__ import annotations

import contextlib
import inspect
import io
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import notebook_accel as na
from notebook_accel.errors import NotebookAccelError, shown
from tests.helpers import HOSTILE, process_state

pytestmark = pytest.mark.timeout(120)

VALUES: dict[str, Any] = {**HOSTILE, "none": None, "huge": 10**5000, "minus one": -1, "word": "abc", "half": 1.5,
                          "inf": math.inf}


def _batch(batch_size: int) -> int:
    return batch_size


def _good() -> dict[str, dict[str, Any]]:
    """Per function, the arguments of a call that works (the fuzzed parameter replaces one of them)."""
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    return {
        "find_executable_batch_size": {"function": _batch, "starting_batch_size": 4},
        "init_on_device": {"device": "cpu", "include_buffers": False},
        "set_seed": {"seed": 1, "device_specific": False, "deterministic": False},
        "progress": {"iterable": [1, 2], "total": None, "desc": "", "interval": 0.1},
        "load_checkpoint_in_model": {"model": torch.nn.Linear(2, 2), "checkpoint": "/nonexistent", "strict": False},
        "prepare_data_loader": {"dataloader": loader},
        "skip_first_batches": {"dataloader": loader, "num_batches": 1},
        "synchronize_rng_states": {"rng_types": ["torch"], "generator": None},
    }


def _use(name: str, result: Any) -> None:
    """Make a lazy result do its work (a generator loops, a context manager enters, a decorator runs)."""
    if name == "progress":
        list(result)
    elif name == "init_on_device":
        with result:
            torch.nn.Linear(1, 1)
    elif name == "find_executable_batch_size":
        result()


def test_public_functions_with_hostile_values() -> None:
    from notebook_accel.launcher.kernel.warmup import warm_kernel

    warm_kernel("gloo")  # a background import of torch modules (started in a kernel) must not overlap the cases
    for name, good in _good().items():  # first uses import modules (descriptors come and go): not per-call leaks
        with contextlib.suppress(Exception):
            _use(name, getattr(na, name)(**good))
    outcomes: dict[str, int] = {}
    for name, good in _good().items():
        function: Callable[..., Any] = getattr(na, name)
        for parameter in inspect.signature(function).parameters:
            if parameter not in good:
                continue
            for kind, value in VALUES.items():
                case = {**good, parameter: value}
                label = f"{name}({parameter}={kind}: {shown(value, 40)})"
                before = process_state()
                try:
                    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                        warnings.simplefilter("ignore")
                        _use(name, function(**case))
                    outcomes["ok"] = outcomes.get("ok", 0) + 1
                except (NotebookAccelError, TypeError, ValueError) as e:
                    message = str(e)
                    path_error = name == "load_checkpoint_in_model" and "no weights at" in message  # names the path
                    if not (path_error and parameter != "model"):
                        assert parameter in message, f"{label}: the error does not name {parameter}: {message[:300]}"
                    assert len(message) < 2000, f"{label}: a {len(message)}-character message"
                    outcomes["error"] = outcomes.get("error", 0) + 1
                except Exception as e:  # noqa: BLE001 - the point of the test
                    pytest.fail(f"{label}: raised {type(e).__name__}: {str(e)[:300]}")
                assert before.leaks(process_state()) == [], label
    assert outcomes.get("error", 0) >= 100 and outcomes.get("ok", 0) >= 10, outcomes


def test_accelerator_methods_with_hostile_values(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``reduce``, ``clip_grad_norm_``, ``save_state``, ``load_state``, ``save_model``, ``log``, ``save`` and
    ``split_between_processes``, each parameter given each hostile value: a result, or an error naming the
    parameter (was a raw TypeError/OverflowError from torch or float(), an AttributeError from ``log(log_kwargs=[1])``
    or ``save(f=None)``, a KeyError-free ``len()`` TypeError from ``split_between_processes({"a": 1})``, or a
    message quoting a 100,000-character path), and nothing left behind."""
    monkeypatch.chdir(tmp_path)
    accelerator = na.Accelerator(cpu=True)
    weight = torch.nn.Parameter(torch.ones(2))
    weight.grad = torch.ones(2)
    calls: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
        "reduce": (accelerator.reduce, {"tensor": torch.ones(2), "reduction": "sum", "scale": 1.0}),
        "clip_grad_norm_": (accelerator.clip_grad_norm_, {"parameters": [weight], "max_norm": 1.0, "norm_type": 2.0}),
        "save_state": (accelerator.save_state, {"output_dir": "ck"}),
        "load_state": (accelerator.load_state, {"input_dir": "ck", "allow_world_size_change": False}),
        "save_model": (accelerator.save_model, {"model": torch.nn.Linear(1, 1), "save_directory": "m",
                                                "max_shard_size": "10GB", "safe_serialization": True}),
        "log": (accelerator.log, {"values": {"loss": 1.0}, "step": 1, "log_kwargs": {"live": {}}}),
        "save": (accelerator.save, {"obj": {"w": torch.ones(1)}, "f": "saved.pt", "safe_serialization": False}),
        "save (safetensors)": (accelerator.save, {"obj": {"w": torch.ones(1)}, "f": "saved.safetensors",
                                                  "safe_serialization": True}),
        "split_between_processes": (_entered(accelerator.split_between_processes),
                                    {"inputs": {"a": [1, 2]}, "apply_padding": False}),
    }
    accelerator.save_state("ck")
    errors = 0
    for name, (method, good) in calls.items():
        for parameter in (p for p in good if p != "tensor"):
            for kind, value in VALUES.items():
                label = f"{name}({parameter}={kind})"
                before = process_state()
                try:
                    method(**{**good, parameter: value})
                except (NotebookAccelError, TypeError, ValueError) as e:
                    assert parameter in str(e) and len(str(e)) < 2000, f"{label}: {str(e)[:300]}"
                    errors += 1
                except Exception as e:  # noqa: BLE001 - the point of the test
                    pytest.fail(f"{label}: raised {type(e).__name__}: {str(e)[:300]}")
                assert before.leaks(process_state()) == [], label
    assert errors >= 100, errors


def _entered(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, a context manager factory, as a call that enters and leaves the context it returns."""
    def call(**kwargs: Any) -> Any:
        with method(**kwargs) as value:
            return value
    return call


def test_log_with_a_tracker_and_hostile_values(tmp_path: Any) -> None:
    """``log`` with a started tracker, its ``values``, a value in it, its names and ``step`` given each hostile
    value: the line is written (a value no tracker can show is skipped with a warning) or an error names the
    parameter (were AttributeError ``'NoneType' object has no attribute 'items'``, ``int(step)``'s
    ValueError/TypeError, and OverflowError/ValueError for a 5,000-digit value or name)."""
    accelerator = na.Accelerator(cpu=True, log_with="jsonl", project_dir=str(tmp_path))
    accelerator.init_trackers("fuzz")
    accelerator.log({"warm": 1.0}, step=0)  # the first line opens the file: no per-call leak
    outcomes: dict[str, int] = {}
    for kind, value in VALUES.items():
        cases = {"values": lambda v=value: accelerator.log(v, step=1),
                 "step": lambda v=value: accelerator.log({"loss": 1.0}, step=v),
                 "values (a value)": lambda v=value: accelerator.log({"loss": v}, step=1),
                 "values (a name)": lambda v=value: accelerator.log({v: 1.0} if _hashable(v) else {"x": v}, step=1)}
        for parameter, call in cases.items():
            label = f"log({parameter}={kind}: {shown(value, 40)})"
            before = process_state()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call()
                outcomes["ok"] = outcomes.get("ok", 0) + 1
            except (NotebookAccelError, TypeError, ValueError) as e:
                name = parameter.split()[0]
                assert f"log({name}=" in str(e) and len(str(e)) < 2000, f"{label}: {str(e)[:300]}"
                outcomes["error"] = outcomes.get("error", 0) + 1
            except Exception as e:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{label}: raised {type(e).__name__}: {str(e)[:300]}")
            assert before.leaks(process_state()) == [], label
    accelerator.end_training()
    assert outcomes.get("error", 0) >= 20 and outcomes.get("ok", 0) >= 10, outcomes


def _hashable(value: Any) -> bool:
    """Whether ``value`` can be a dict key."""
    try:
        hash(value)
    except TypeError:
        return False
    return True
