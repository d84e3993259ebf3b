"""Checkpoints: atomic ``save_state`` / ``load_state`` with exact resume, and ``save_model``.

The :class:`~notebook_accel.Accelerator` delegates ``save_state``, ``load_state``, ``register_for_checkpointing``
and ``save_model`` here (``save_model`` writes accelerate's ``model.safetensors`` layout, see ``export``).

Layout of a checkpoint directory (accelerate's names where it has one)::

    manifest.json                    format version, world size, objects, file sizes + XXH3-128 (written last)
    pytorch_model.bin, _1.bin ...    unwrapped model weights
    optimizer.bin, optimizer_1.bin   optimizer states
    scheduler.bin, ...               scheduler states
    scaler.pt                        GradScaler (fp16 only)
    dl_state_dict_rank<r>.bin        prepared loader 0's state on rank r (epoch, position, shuffle seed)
    custom_checkpoint_<i>.pkl        register_for_checkpointing objects
    random_states_<r>.pkl            rank r's python / numpy / torch / cuda RNG

Under FSDP a sharded model and its optimizer take the place of ``pytorch_model_<i>.bin`` / ``optimizer_<i>.bin``
(see :mod:`notebook_accel.engines.fsdp.checkpoint`)::

    pytorch_model_fsdp_<i>_rank<r>_0.distcp   rank r's shards of model i (torch.distributed.checkpoint)
    pytorch_model_fsdp_<i>.metadata           DCP's index of them
    optimizer_<i>_rank<r>_0.distcp, optimizer_<i>.metadata    the same for its optimizer
    pytorch_model_fsdp_<i>.bin, optimizer_<i>.bin    instead, with state_dict_type="FULL_STATE_DICT" (rank 0)

Under DeepSpeed, the engine's own ``save_checkpoint`` files take their place (see
:mod:`notebook_accel.engines.deepspeed.checkpoint`); each engine supplies these objects (``engine.checkpoint_model``)::

    mp_rank_00_model_states.pt                      the weights (ZeRO 0-2, rank 0)
    zero_pp_rank_<r>_mp_rank_00_model_states.pt     rank r's parameter partition (ZeRO-3)
    zero_pp_rank_<r>_mp_rank_00_optim_states.pt     rank r's optimizer partition (ZeRO 1-3)
    zero_to_fp32.py, zero_to_torch.py               DeepSpeed's recovery scripts (ZeRO 1-3)

Safety: built in ``.tmp-<name>-<nonce>`` and renamed into place when every rank has finished (crash or kill
mid-save leaves the previous checkpoint intact); a failure on any rank raises :class:`CheckpointError` on all.
Loading validates everything on every rank before modifying anything.

Every file is read with ``torch.load(weights_only=True)`` (RNG states are stored as tensors and plain numbers), so a
checkpoint from elsewhere cannot run code when loaded (DeepSpeed's files are read that way first, then by DeepSpeed).
The one limit: a scheduler or ``register_for_checkpointing`` object whose ``state_dict()`` holds arbitrary Python
objects (a lambda, a custom class) cannot be loaded that way; load_state then raises a CheckpointError saying so. Keep
such state to tensors, numbers, strings, lists and dicts.

Exact resume: the RNG of every rank and every prepared loader's state (epoch, shuffle seed, batches already
yielded) are saved, so after ``load_state`` the next ``iter(loader)`` yields exactly the batches the uninterrupted
run would have, mid-epoch included: just keep iterating the prepared loader (``loader.epoch`` says which epoch it
is in). No ``skip_first_batches`` call is needed; do not add one for the position the checkpoint already holds.
Dropout, shuffling, momentum, schedules and the accumulation counter then continue bit for bit. Save at an
optimizer-step boundary: gradients accumulated since the last step (``gradient_accumulation_steps > 1``) are not
part of a checkpoint, as in accelerate.
"""

from __future__ import annotations

from notebook_accel.checkpointing.errors import CheckpointError, ShardSizeError, UnregistrableError
from notebook_accel.checkpointing.export import save_model
from notebook_accel.checkpointing.load import load_state
from notebook_accel.checkpointing.objects import check_registrable
from notebook_accel.checkpointing.save import save_state

__all__ = ["CheckpointError", "ShardSizeError", "UnregistrableError", "save_state", "load_state", "check_registrable", "save_model"]
