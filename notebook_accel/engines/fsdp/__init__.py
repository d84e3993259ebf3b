"""Fully sharded data parallel training through torch's ``fully_shard`` (FSDP2).

:class:`FullyShardedDataParallelPlugin` (accelerate's options object) says how; :mod:`notebook_accel.config.fsdp` holds
the allowed values shared with the config file; the modules that need torch (:mod:`.wrap` shards a model,
:mod:`.params` re-binds optimizers, :mod:`.checkpoint` gathers and saves weights) are imported when used.
"""

from __future__ import annotations

from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin

__all__ = ["FullyShardedDataParallelPlugin"]
