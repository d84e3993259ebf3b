"""The function and the arguments of a remote run, pickled each once before anything starts on the cluster: what
cannot travel is refused in one line that names it (the path inside it to the culprit, :mod:`.pickling`), the same
for every placement; only how a value is sent (``ray.put``, ``cloudpickle.dumps``) and to whom differ."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from notebook_accel.errors import LaunchError, shown
from notebook_accel.launcher.placement.remote import pickling

__all__ = ["pickle_each"]

_Sent = TypeVar("_Sent")


def _same(error: BaseException) -> BaseException:
    return error


def pickle_each(put: Callable[[Any], _Sent], function: Callable[..., Any], args: tuple[Any, ...], workers: str,
                cause: Callable[[BaseException], BaseException] = _same) -> tuple[_Sent, list[_Sent]]:
    """``put`` the function, then each argument; the first that cannot be pickled is refused.

    Args:
        put: pickles (and stores) one value. ``workers``: who the values go to, for the message ("the Ray
            workers"). ``cause``: the error to chain from, given ``put``'s (Ray wraps the pickler's).

    Raises:
        LaunchError: naming the function or ``args[i]``, the path to what cannot be pickled, and the fix.
    """
    try:
        sent_function = put(function)
    except Exception as e:  # noqa: BLE001 - picklers raise many kinds
        name = getattr(function, "__name__", "")
        culprit = pickling.describe(function, name if name.isidentifier() else "function", e)
        raise LaunchError(pickling.one_line(
            f"the function {shown(function, 60)} cannot be sent to {workers}: {culprit}; it must be picklable by "
            "cloudpickle (functions, classes and closures of the notebook are; open files, locks and sockets are "
            "not): make such objects inside the function, or pass data the workers can unpickle")) from cause(e)
    sent = []
    for index, value in enumerate(args):
        try:
            sent.append(put(value))
        except Exception as e:  # noqa: BLE001
            culprit = pickling.describe(value, f"args[{index}]", e)
            raise LaunchError(pickling.one_line(
                f"args[{index}] ({type(value).__name__}: {shown(value, 60)}) cannot be sent to {workers}: {culprit}; "
                "pass data the workers can unpickle, or make it inside the function (open files, locks, sockets and "
                "live connections do not travel)")) from cause(e)
    return sent_function, sent
