"""Engines: how a model is distributed (plain/DDP, FSDP, DeepSpeed ZeRO), one small module each behind one protocol.

The :class:`~notebook_accel.Accelerator` builds one engine from its plugins and the launch config
(:func:`~notebook_accel.engines.select.select_engine`) and asks it for everything that differs between engines;
it never branches on the engine itself. :mod:`.registry` lists the sharded engines without importing them (no
torch), :mod:`.protocol` states what an engine does, :mod:`.ddp` is the plain one (one process, or DDP),
``notebook_accel.engines.fsdp.engine`` and ``notebook_accel.engines.deepspeed.engine`` the sharded ones (imported
only when asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from notebook_accel._lazy import lazy_exports

# the protocol imports torch; the registry (torch-free) must stay cheap to import through this package
_EXPORTS: dict[str, str] = {"Engine": "notebook_accel.engines.protocol"}
__all__ = ["Engine"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from notebook_accel.engines.protocol import Engine
