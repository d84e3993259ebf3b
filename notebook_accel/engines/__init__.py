"""Engines: how a model is distributed (plain/DDP, FSDP, DeepSpeed ZeRO), one small module each behind one protocol.

The :class:`~notebook_accel.Accelerator` builds one engine from its plugins and the launch config
(:func:`~notebook_accel.engines.select.select_engine`) and asks it for everything that differs between engines;
it never branches on the engine itself. :mod:`.protocol` states what an engine does, :mod:`.ddp` is the plain
one (one process, or DDP), ``notebook_accel.engines.fsdp.engine`` and ``notebook_accel.engines.deepspeed.engine`` the sharded
ones (imported only when asked for).
"""

from __future__ import annotations

from notebook_accel.engines.protocol import Engine

__all__ = ["Engine"]
