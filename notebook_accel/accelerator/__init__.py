"""The :class:`Accelerator` and the small modules its methods delegate to.

The facade is :mod:`notebook_accel.accelerator.accelerator`; each other module here owns one concept of it:
``process_facade`` (process properties and helpers read from the state), ``accelerate_methods`` (accelerate's
thin extras), ``preparing`` (the records of prepared objects), ``collectives`` (metric gathering, the trigger),
``models`` (unwrapping), ``saving`` (``save`` and the saved-checkpoint notice), ``tracking`` (the tracker hub)
and ``training_probe`` (a prepared loader asking, weakly, whether a model trains).
"""

from __future__ import annotations

from notebook_accel.accelerator.accelerator import Accelerator

__all__ = ["Accelerator"]
