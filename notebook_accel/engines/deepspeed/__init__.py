"""DeepSpeed ZeRO stages 1-3 through the ``deepspeed`` package (``pip install notebook-accel[deepspeed]``).

:class:`DeepSpeedPlugin` (accelerate's options object) says how; :mod:`notebook_accel.config.deepspeed` holds the
allowed values shared with the config file. The modules that import ``deepspeed`` (:mod:`.engine`,
:mod:`.checkpoint`) are loaded only when an Accelerator trains with DeepSpeed: importing it takes seconds.
"""

from __future__ import annotations

from notebook_accel.engines.deepspeed.plugin import DeepSpeedPlugin

__all__ = ["DeepSpeedPlugin"]
