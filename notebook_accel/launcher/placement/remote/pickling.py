"""Where, inside a value that cannot be pickled, the object that cannot be pickled is: for a remote placement's
refusal of a function or argument that cannot travel to the workers (:mod:`.payload`).

:func:`find_unpicklable` pickles the value, and while that fails walks into it (attributes in ``__dict__`` and
``__slots__``, list, tuple and set items, dict values, a function's closure, referenced globals and defaults, a bound
method's object, a partial's parts), following only a part that cannot be pickled on its own, until it reaches one
whose parts all can: the innermost culprit, with the path that leads to it (``args[1].model._lock``). The walk is
bounded in depth and in the number of parts tried, and never enters the same object twice, so a cycle or a huge
container costs little. Nothing here needs a cluster; the pickler is Ray's ``cloudpickle`` (what ``ray.put`` uses)
when Ray is importable, else ``cloudpickle``, else :mod:`pickle`.
"""

from __future__ import annotations

import functools
import pickle
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

from notebook_accel.errors import shown

__all__ = ["Unpicklable", "find_unpicklable", "describe", "default_probe", "one_line"]

MAX_DEPTH = 32
MAX_TRIES = 2000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

#: Pickles one object and returns the error (``None``: it pickles).
Probe = Callable[[Any], "BaseException | None"]


@dataclass(frozen=True)
class Unpicklable:
    """The innermost object that cannot be pickled: its ``path`` from the root, its type and the pickler's reason
    (``itself``: the root is the culprit, none of its parts is)."""

    path: str
    type_name: str
    reason: str
    itself: bool = False

    def __str__(self) -> str:
        return f"{self.path}{' itself' if self.itself else ''} ({self.type_name}) cannot be pickled ({self.reason})"


def one_line(text: str, width: int = 0) -> str:
    """``text`` without ANSI colour codes, its whitespace (newlines included) collapsed; cut to ``width`` if set.

    Example:
        >>> one_line("\\x1b[31m!!! FAIL\\x1b[39m  serialization\\n  of lock")
        '!!! FAIL serialization of lock'
    """
    flat = " ".join(_ANSI.sub("", text).split())
    return flat if width <= 0 or len(flat) <= width else flat[:width - 3] + "..."


class _Discard:
    """A file that drops what is written (a probe needs the pickler's verdict, not the bytes)."""

    def write(self, data: Any) -> int:
        return len(data)


def _pickler_class() -> Any:
    """Ray's cloudpickle pickler, else cloudpickle's, else the standard one."""
    try:
        from ray import cloudpickle as ray_cloudpickle

        return ray_cloudpickle.CloudPickler
    except Exception:  # noqa: BLE001 - Ray absent or broken: fall back
        pass
    try:
        import cloudpickle

        return cloudpickle.CloudPickler
    except Exception:  # noqa: BLE001
        return pickle.Pickler


def default_probe() -> Probe:
    """A probe that pickles with the pickler ``ray.put`` uses (see the module's note), into nothing."""
    pickler = _pickler_class()

    def probe(value: Any) -> BaseException | None:
        try:
            pickler(_Discard(), protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        except Exception as e:  # noqa: BLE001 - picklers raise TypeError, PicklingError, AttributeError, ...
            return e
        except RecursionError as e:
            return e
        return None

    return probe


def find_unpicklable(value: Any, root: str, probe: Probe | None = None, max_depth: int = MAX_DEPTH,
                     max_tries: int = MAX_TRIES) -> Unpicklable | None:
    """The innermost part of ``value`` that cannot be pickled, named by its path from ``root``; ``None`` when
    ``value`` pickles.

    Args:
        value: what failed to travel.
        root: how the message names ``value`` (``"args[1]"``).
        probe: pickles one object, returns the error or ``None`` (default: :func:`default_probe`).
        max_depth: how many steps the path may take at most.
        max_tries: how many parts may be pickled at most (when it runs out, the deepest culprit found so far is it).

    Example:
        >>> import threading
        >>> found = find_unpicklable({"opts": [1, threading.Lock()]}, "args[0]")
        >>> found.path, found.type_name
        ("args[0]['opts'][1]", '_thread.lock')
    """
    probe = probe or default_probe()
    error = probe(value)
    if error is None:
        return None
    path, current, seen, tries = root, value, {id(value)}, 1
    for _ in range(max_depth):
        found = None
        for step, part in _parts(current):
            if id(part) in seen:
                continue
            if tries >= max_tries:
                break
            tries += 1
            part_error = probe(part)
            if part_error is not None:
                found = (step, part, part_error)
                break
        if found is None:
            break  # every part pickles (or none is left to try): ``current`` is the culprit
        step, current, error = found
        path += step
        seen.add(id(current))
    return Unpicklable(path, _type_name(current), one_line(f"{type(error).__name__}: {error}", 200), current is value)


def _type_name(value: Any) -> str:
    """``module.QualName`` of the value's type (builtins without the module)."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _parts(value: Any) -> Iterator[tuple[str, Any]]:
    """The parts a pickler would pickle with ``value``: (the step of the path to it, the part). Never raises."""
    try:
        yield from _parts_of(value)
    except Exception:  # noqa: BLE001 - an odd object (a property that raises, a dict that changes): stop there
        return


def _parts_of(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"[{shown(key, 40)}]", item
    elif isinstance(value, (list, tuple)):
        yield from ((f"[{i}]", item) for i, item in enumerate(value))
    elif isinstance(value, (set, frozenset)):
        yield from (("{" + shown(item, 40) + "}", item) for item in value)
    elif isinstance(value, types.FunctionType):
        yield from _function_parts(value)
    elif isinstance(value, types.MethodType):
        yield ".__self__", value.__self__
        yield ".__func__", value.__func__
    elif isinstance(value, functools.partial):
        yield ".func", value.func
        yield from ((f".args[{i}]", item) for i, item in enumerate(value.args))
        yield from ((f".keywords[{key!r}]", item) for key, item in value.keywords.items())
    elif isinstance(value, types.ModuleType):
        return  # pickled by reference: its contents do not travel
    else:
        yield from _attributes(value)


def _function_parts(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """What cloudpickle sends with a function pickled by value: closure cells, globals it names, defaults."""
    code = function.__code__
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            yield f".<closure:{name}>", cell.cell_contents
        except ValueError:  # an empty cell (the variable is not assigned yet)
            continue
    names: list[str] = []
    codes = [code]
    while codes and len(names) < 500:
        current = codes.pop()
        names += [n for n in current.co_names if n not in names]
        codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    for name in names:
        if name in function.__globals__:
            yield f".<global:{name}>", function.__globals__[name]
    yield from ((f".__defaults__[{i}]", item) for i, item in enumerate(function.__defaults__ or ()))
    yield from ((f".__kwdefaults__[{k!r}]", item) for k, item in (function.__kwdefaults__ or {}).items())


def _attributes(value: Any) -> Iterator[tuple[str, Any]]:
    """An object's attributes: its ``__dict__``, then its ``__slots__`` (the name-mangled ones included)."""
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, (dict, types.MappingProxyType)):
        for name, item in list(attributes.items()):
            if not (name.startswith("__") and name.endswith("__")):
                yield f".{name}", item
    missing = object()
    for kind in type(value).__mro__:
        slots = kind.__dict__.get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            stored = f"_{kind.__name__.lstrip('_')}{name}" if name.startswith("__") else name
            item = getattr(value, stored, missing)
            if item is not missing:
                yield f".{name}", item


def describe(value: Any, root: str, error: BaseException, probe: Probe | None = None) -> str:
    """One clean line on why ``value`` (named ``root``) failed to pickle with ``error``: the culprit's path, type and
    reason, or the first line of the error when the value pickles here (it failed for a reason of Ray's own)."""
    found = find_unpicklable(value, root, probe)
    if found is not None:
        return str(found)
    text = _ANSI.sub("", str(error)).strip()
    return f"{type(error).__name__}: {one_line(text.splitlines()[0] if text else '', 200)}"
