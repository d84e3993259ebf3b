"""The epoch count of a run, read from the user's own tqdm bar around the epoch loop.

The dashboard's run bar (all epochs' batches, a total and an ETA) needs the number of epochs, which the prepared
DataLoader cannot know: the user's ``for epoch in range(3):`` keeps it. Many training loops wrap that loop in a
tqdm bar (``for epoch in tqdm(range(3)):``); tqdm keeps every live bar of the process in ``tqdm._instances``.
When a prepared loader starts an epoch, the outermost open bar with a known total that is not counting this
loader's batches is taken as the epoch loop and reported as a ``progress()`` loop would be, so the dashboard
counts the epochs from it (:mod:`notebook_accel.widgets.progress_model`). Nothing is imported: without tqdm
loaded there is nothing to read.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["epoch_bar", "epoch_loop_position"]


def epoch_bar(loader: Any, batches: int | None) -> tuple[int, int, str] | None:
    """``(epochs done, epochs, desc)`` of the open tqdm bar that looks like the epoch loop around ``loader``.

    Bars that wrap ``loader`` itself, count as many items as it has batches (a bar over the batches), are
    finished or have no total are left out; of the rest, the first one opened (the outermost loop).
    """
    module = sys.modules.get("tqdm.std")
    cls = getattr(module, "tqdm", None)
    instances = getattr(cls, "_instances", None)
    if instances is None:
        return None
    candidates = []
    for bar in list(instances):
        total, n = getattr(bar, "total", None), getattr(bar, "n", 0)
        if getattr(bar, "disable", False) or not isinstance(total, int) or total <= 0 or not 0 <= n < total:
            continue
        if getattr(bar, "iterable", None) is loader or total == batches:
            continue
        candidates.append((getattr(bar, "start_t", 0.0), n, total, str(getattr(bar, "desc", "") or "epochs")))
    if not candidates:
        return None
    _, n, total, desc = min(candidates)
    return n, total, desc.rstrip(": ") or "epochs"


def epoch_loop_position(loader: Any, batches: int | None, done: int) -> tuple[int, int, str] | None:
    """``(n, total, desc)`` of the epoch loop around ``loader``, reported as a ``"loop"`` progress; ``None``
    without one.

    ``done`` is the epochs the loader has finished: tqdm moves a bar's count only when it redraws (at most every
    0.1 s), so the bar's own count may lag one epoch behind.
    """
    found = epoch_bar(loader, batches)
    if found is None:
        return None
    n, total, desc = found
    return min(max(n, done), total - 1), total, desc
