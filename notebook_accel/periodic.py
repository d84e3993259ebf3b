"""Calling a function now and then from a short-lived thread while a block of code runs.

The launcher keeps the dashboard's clock moving while the kernel is busy (:mod:`notebook_accel.display.phases`),
and a DeepSpeed worker looks at its op build folders while DeepSpeed sets up
(:mod:`notebook_accel.engines.deepspeed.build_notice`): both call something every few seconds until a block ends,
then join the thread, so that nothing of it is left running after the block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["every"]


@contextmanager
def every(seconds: float, call: Callable[[], None], name: str) -> Iterator[None]:
    """Call ``call()`` every ``seconds`` from a daemon thread named ``name`` while the block runs (not at its start
    or end); the thread is stopped and joined when the block ends, however it ends.

    Example:
        >>> import time
        >>> calls = []
        >>> with every(0.01, lambda: calls.append(1), "example"):
        ...     time.sleep(0.1)
        >>> len(calls) > 0
        True
    """
    done = threading.Event()

    def loop() -> None:
        while not done.wait(seconds):
            call()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
