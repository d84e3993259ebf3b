"""register_for_checkpointing's check and the collection of saved objects."""

from __future__ import annotations

import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, UnregistrableError, check_registrable, save_state
from notebook_accel.checkpointing.objects import collect
from tests.checkpointing.fakes import Counter, make_accelerator


def test_registrable_objects_pass() -> None:
    check_registrable(Counter())
    check_registrable(torch.nn.Linear(1, 1))


@pytest.mark.parametrize("obj, missing", [(42, "state_dict / load_state_dict"), (object(), "state_dict")])
def test_unregistrable_objects_are_refused(obj, missing) -> None:
    with pytest.raises(UnregistrableError, match=f"has no {missing}.*Wrap it") as info:
        check_registrable(obj)
    assert isinstance(info.value, TypeError) and isinstance(info.value, CheckpointError)


def test_half_stateful_object_names_the_missing_method() -> None:
    class SaveOnly:
        def state_dict(self) -> dict:
            return {}

    with pytest.raises(UnregistrableError, match="SaveOnly object .* has no load_state_dict"):
        check_registrable(SaveOnly())


def test_files_follow_accelerate_names_and_rng_comes_last() -> None:
    acc = make_accelerator(scaler=True)
    acc._models.append(torch.nn.Linear(1, 1))
    acc._optimizers.append(torch.optim.SGD(acc._models[1].parameters(), lr=1.0))
    files = [(s.entry.kind, s.entry.file) for s in collect(acc)]
    assert files == [
        ("model", "pytorch_model.bin"),
        ("model", "pytorch_model_1.bin"),
        ("optimizer", "optimizer.bin"),
        ("optimizer", "optimizer_1.bin"),
        ("scheduler", "scheduler.bin"),
        ("scaler", "scaler.pt"),
        ("dataloader", "dl_state_dict_rank{rank}.bin"),
        ("custom", "custom_checkpoint_0.pkl"),
        ("rng", "random_states_{rank}.pkl"),
    ]


def test_loader_without_state_dict_is_refused(tmp_path) -> None:
    acc = make_accelerator()
    acc._dataloaders = [object()]
    with pytest.raises(CheckpointError, match="dataloader 0 .*has no state_dict"):
        save_state(acc, tmp_path / "c")
