"""What a checkpoint holds: the Accelerator's prepared and registered objects, each with its file name, a way to
read its state, to check a loaded state against it, and to apply it.

File names follow accelerate's where there is one: ``pytorch_model.bin`` / ``pytorch_model_<i>.bin``,
``optimizer.bin`` / ``optimizer_<i>.bin``, ``scheduler.bin`` / ``scheduler_<i>.bin``, ``scaler.pt``,
``custom_checkpoint_<i>.pkl`` and the per-rank ``random_states_<rank>.pkl``. A prepared loader's position,
epoch and shuffle state can differ between ranks, so every rank saves its own: ``dl_state_dict_rank<rank>.bin``
(loader 0) and ``dl_state_dict_<i>_rank<rank>.bin``. Every file is written with ``torch.save`` and read with
``torch.load(weights_only=True)``, whatever its extension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from notebook_accel.checkpointing.errors import CheckpointError, UnregistrableError
from notebook_accel.checkpointing.manifest import Entry, Kind, Manifest
from notebook_accel.checkpointing.rng import capture_rng_state, check_rng_state, restore_rng_state
from notebook_accel.checkpointing.saved import CheckpointContext, Saved

__all__ = ["Saved", "check_registrable", "collect"]


def check_registrable(obj: object) -> None:
    """Refuse an object that ``register_for_checkpointing`` could not save or restore.

    Args:
        obj: anything with callable ``state_dict()`` and ``load_state_dict(state)`` methods.

    Raises:
        UnregistrableError: ``obj`` lacks one of them (a CheckpointError and a TypeError).

    Example:
        >>> check_registrable(torch.nn.Linear(1, 1))
        >>> check_registrable(42)
        Traceback (most recent call last):
        ...
        notebook_accel.checkpointing.errors.UnregistrableError: ...
    """
    missing = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(obj, m, None))]
    if missing:
        raise UnregistrableError(
            f"register_for_checkpointing got {type(obj).__name__} object {obj!r:.80}, which has no "
            f"{' / '.join(missing)} method; only objects with both state_dict() and load_state_dict(state) can be "
            "checkpointed. Wrap it in a small class with those two methods."
        )


def _indexed(base: str, ext: str, i: int) -> str:
    """``base.ext`` for the first object, ``base_<i>.ext`` for the others (accelerate's scheme)."""
    return f"{base}.{ext}" if i == 0 else f"{base}_{i}.{ext}"


def _dict_check(label: str) -> Callable[[Any], list[str]]:
    """A check that a saved state is a dict (what every state_dict returns)."""

    def check(state: Any) -> list[str]:
        return [] if isinstance(state, dict) else [f"{label}: saved state is {type(state).__name__}, expected a dict"]

    return check


def _model_check(model: torch.nn.Module, label: str) -> Callable[[Any], list[str]]:
    """Check a saved model state against the model: same keys; tensors where it has tensors, same shapes and dtypes."""

    def check(state: Any) -> list[str]:
        if not isinstance(state, dict):
            return [f"{label}: saved state is {type(state).__name__}, expected a state dict"]
        current = model.state_dict()
        missing = sorted(set(current) - set(state))
        unexpected = sorted(set(state) - set(current))
        problems = []
        if missing or unexpected:
            problems.append(
                f"{label}: keys differ (missing in checkpoint: {missing[:5]}, unexpected: {unexpected[:5]})"
            )
        for key in sorted(set(current) & set(state)):
            a, b = current[key], state[key]
            if isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
                problems.append(f"{label}: {key} is a {type(b).__name__} in the checkpoint, not a tensor")
            elif isinstance(a, torch.Tensor) and a.shape != b.shape:
                problems.append(f"{label}: {key} has shape {tuple(b.shape)} in the checkpoint, {tuple(a.shape)} here")
            elif isinstance(a, torch.Tensor) and a.dtype != b.dtype:  # load_state_dict would cast it silently
                problems.append(f"{label}: {key} has dtype {b.dtype} in the checkpoint, {a.dtype} here; cast the model "
                                "as in the saving run (model.to(dtype)) before load_state")
        return problems[:10]

    return check


def _optimizer_check(optimizer: Any, label: str) -> Callable[[Any], list[str]]:
    """Check a saved optimizer state: same number of parameter groups and parameters per group."""

    def check(state: Any) -> list[str]:
        if not isinstance(state, dict) or "param_groups" not in state:
            return [f"{label}: saved state is not an optimizer state dict"]
        groups = state["param_groups"]
        if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                                   for g in groups):
            return [f"{label}: the saved param_groups are not a list of groups with params"]
        here = [len(g["params"]) for g in optimizer.state_dict()["param_groups"]]
        saved = [len(g["params"]) for g in groups]
        if here != saved:
            return [f"{label}: parameters per group {saved} in the checkpoint, {here} here"]
        return _buffer_problems(label, optimizer, state)

    return check


def _buffer_problems(label: str, optimizer: Any, state: dict[str, Any]) -> list[str]:
    """The saved per-parameter buffers (``exp_avg``, ``momentum_buffer``...) must be tensors of the parameter's
    shape (or scalars, like ``step``); loading others would fail half-way or train with garbage."""
    inner = getattr(optimizer, "optimizer", optimizer)
    params = [p for g in getattr(inner, "param_groups", []) for p in g["params"]]
    ids = [i for g in state["param_groups"] for i in g["params"]]
    saved = state.get("state", {})
    if not isinstance(saved, dict):
        return [f"{label}: the saved per-parameter state is a {type(saved).__name__}, not a dict"]
    problems = []
    for pid, param in zip(ids, params):
        buffers = saved.get(pid, {})
        if not isinstance(buffers, dict):
            problems.append(f"{label}: the state of parameter {pid} is a {type(buffers).__name__}, not a dict")
            continue
        for name, value in buffers.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                problems.append(f"{label}: {name} of parameter {pid} has shape {tuple(value.shape)} in the "
                                f"checkpoint, the parameter is {tuple(param.shape)}")
            elif not isinstance(value, (torch.Tensor, int, float, bool)) and value is not None:
                problems.append(f"{label}: {name} of parameter {pid} is a {type(value).__name__}")
    unknown = sorted(set(saved) - set(ids), key=str)
    if unknown:
        problems.append(f"{label}: state for parameters {unknown[:5]} that no group lists")
    return problems[:10]


def _same_kind(here: Any, saved: Any) -> bool:
    """A saved value of the type the object holds now (an int for an int, never a bool; anything for None)."""
    if isinstance(here, bool) or isinstance(saved, bool):
        return isinstance(here, bool) and isinstance(saved, bool)
    return here is None or isinstance(saved, type(here))


def _keys_check(obj: Any, label: str) -> Callable[[Any], list[str]]:
    """A check that a saved state is a dict with the keys the object's own state has (a loader's position), each
    value of the same type, so its ``load_state_dict`` cannot fail half-way (``int("one")``)."""

    def check(state: Any) -> list[str]:
        if not isinstance(state, dict):
            return [f"{label}: saved state is {type(state).__name__}, expected a dict"]
        optional = set(getattr(obj, "optional_state_keys", ()))  # e.g. a loader's dataset position
        current = {k: v for k, v in obj.state_dict().items() if k not in optional}
        missing = sorted(set(current) - set(state), key=str)
        if missing:
            return [f"{label}: the saved state lacks {missing}"]
        return [f"{label}: {key!r} is {type(state[key]).__name__} in the checkpoint, {type(value).__name__} here"
                for key, value in current.items() if not _same_kind(value, state[key])][:10]

    return check


def _inner(obj: Any, attr: str) -> Any:
    """The wrapped object (``wrapper.<attr>``), or ``obj`` itself when it is not wrapped."""
    return getattr(obj, attr, obj)


def _stateful(obj: Any, attr: str) -> Any:
    """The object whose state_dict/load_state_dict to use: the wrapper when it has them, else the wrapped one."""
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
        return obj
    return _inner(obj, attr)


def _plain(label: str, kind: Kind, index: int, file: str, obj: Any, type_name: str | None = None,
           per_rank: bool = False, check: Callable[[Any], list[str]] | None = None) -> Saved:
    """A Saved for an object with state_dict/load_state_dict (``type_name``: the class to record, default obj's)."""
    if not callable(getattr(obj, "state_dict", None)) or not callable(getattr(obj, "load_state_dict", None)):
        raise CheckpointError(
            f"{label} ({type(obj).__name__}) has no state_dict() / load_state_dict() method, so it cannot be saved."
        )
    entry = Entry(kind=kind, index=index, file=file, type_name=type_name or type(obj).__name__, per_rank=per_rank)
    return Saved(entry, obj.state_dict, check or _dict_check(f"{label} ({entry.type_name})"), obj.load_state_dict)


def collect(accelerator: Any, saved: Manifest | None = None) -> list[Saved]:
    """Every object a checkpoint of ``accelerator`` holds, in a fixed order (RNG last, so it is restored last).

    The Accelerator's engine says how each model and optimizer is saved (its own layout, or a plain
    ``state_dict`` file). ``saved``: the manifest of the checkpoint being loaded, whose files decide the layout
    the engine reads them in; ``None`` when saving.
    """
    out: list[Saved] = []
    prepared = list(getattr(accelerator, "_models", []))
    models = [accelerator.unwrap_model(m) for m in prepared]
    context = CheckpointContext(prepared, models, saved)
    engine = getattr(accelerator, "engine", None)
    for i, inner in enumerate(models):
        own = None if engine is None else engine.checkpoint_model(i, context)
        if own is not None:
            out.append(own)
            continue
        entry = Entry("model", i, _indexed("pytorch_model", "bin", i), type(inner).__name__)
        out.append(Saved(entry, inner.state_dict, _model_check(inner, entry.label()), inner.load_state_dict))
    for i, opt in enumerate(getattr(accelerator, "_optimizers", [])):
        own = None if engine is None else engine.checkpoint_optimizer(_inner(opt, "optimizer"), i, context)
        if own is not None:
            out.append(own)
            continue
        obj, name = _stateful(opt, "optimizer"), type(_inner(opt, "optimizer")).__name__
        check = _optimizer_check(obj, f"optimizer {i} ({name})")
        out.append(_plain(f"optimizer {i}", "optimizer", i, _indexed("optimizer", "bin", i), obj, name, check=check))
    for i, sched in enumerate(getattr(accelerator, "_schedulers", [])):
        obj, name = _stateful(sched, "scheduler"), type(_inner(sched, "scheduler")).__name__
        out.append(_plain(f"scheduler {i}", "scheduler", i, _indexed("scheduler", "bin", i), obj, name))
    scaler = getattr(accelerator, "scaler", None)
    if scaler is not None:
        out.append(_plain("the GradScaler", "scaler", 0, "scaler.pt", scaler))
    for i, loader in enumerate(getattr(accelerator, "_dataloaders", [])):
        file = "dl_state_dict_rank{rank}.bin" if i == 0 else f"dl_state_dict_{i}_rank{{rank}}.bin"
        out.append(_plain(f"dataloader {i}", "dataloader", i, file, loader, per_rank=True,
                          check=_keys_check(loader, f"dataloader {i}")))
    for i, obj in enumerate(getattr(accelerator, "_custom_objects", [])):
        check_registrable(obj)
        out.append(_plain(f"custom object {i}", "custom", i, f"custom_checkpoint_{i}.pkl", obj))
    rng = Entry("rng", 0, "random_states_{rank}.pkl", "RNG", per_rank=True)
    out.append(Saved(rng, capture_rng_state, lambda s: check_rng_state(s, "random states"), restore_rng_state))
    return out
