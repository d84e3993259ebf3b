"""The seams of the Accelerator package and of the option modules: the functions the facade delegates to, the
weak training probe, and the one error concept (a ConfigError is a ConfigurationError)."""

from __future__ import annotations

import gc
import pickle

import pytest
import torch

from notebook_accel.accelerator.collectives import any_process_flagged, gather_for_metrics
from notebook_accel.accelerator.preparing import (models_training, record_prepared, refuse_dispatch_slicing,
                                                  scheduler_optimizers)
from notebook_accel.accelerator.training_probe import TrainingProbe
from notebook_accel.config import ConfigError
from notebook_accel.data import DataPrepareError
from notebook_accel.errors import NotebookAccelError
from notebook_accel.gradient_state import GradientState
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.plugins import ConfigurationError
from notebook_accel.state import GradientState as StateGradientState


class _Owner:
    """Stands in for an Accelerator: the probe only asks ``_models_training``."""

    def __init__(self, training: bool | None) -> None:
        self.training = training

    def _models_training(self) -> bool | None:
        return self.training


class _EngineLike(torch.nn.Module):
    """Wraps a module as DeepSpeed's engine does: ``train``/``eval`` reach the module, its own flag stays True."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def train(self, mode: bool = True) -> "_EngineLike":
        self.module.train(mode)
        return self

    def eval(self) -> "_EngineLike":
        return self.train(False)


def test_a_wrapper_that_keeps_its_own_training_flag_still_reads_as_eval() -> None:
    engine = _EngineLike(torch.nn.Linear(2, 2))
    engine.eval()
    assert engine.training is True  # what DeepSpeed's engine does: the old check read this flag
    assert models_training([engine]) is False
    engine.train()
    assert models_training([engine]) is True
    assert models_training([]) is None
    plain = torch.nn.Linear(2, 2).eval()
    assert models_training([plain, engine]) is True and models_training([plain]) is False


def test_config_error_is_the_configuration_error_of_a_whole_config() -> None:
    error = ConfigError(["num_processes: got 0", "mixed_precision: got 'fp32'"], source="a.yaml")
    assert isinstance(error, ConfigurationError) and isinstance(error, NotebookAccelError)
    assert isinstance(error, ValueError)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ConfigError and again.problems == error.problems and again.source == "a.yaml"
    with pytest.raises(ConfigurationError, match="in a.yaml: 2 problems"):
        raise error


def test_gradient_state_keeps_accelerates_import_path() -> None:
    assert StateGradientState is GradientState


def test_training_probe_holds_its_owner_weakly_and_pickles() -> None:
    owner = _Owner(True)
    probe = TrainingProbe(owner)
    assert probe() is True and TrainingProbe(None)() is None
    copied_owner, copied_probe = pickle.loads(pickle.dumps((owner, probe)))
    assert copied_probe() is True
    copied_owner.training = False
    assert copied_probe() is False
    del owner, copied_owner
    gc.collect()
    assert probe() is None and copied_probe() is None


def test_record_prepared_records_each_model_and_optimizer_once() -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = AcceleratedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), GradientState(), None)
    models: list[torch.nn.Module] = []
    optimizers: list[AcceleratedOptimizer] = []
    record_prepared([model, optimizer, "other"], models, optimizers)
    record_prepared([model, optimizer], models, optimizers)
    assert models == [model] and optimizers == [optimizer]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer.optimizer, 1)
    assert scheduler_optimizers(scheduler, optimizers) == [optimizer]
    assert scheduler_optimizers(scheduler, []) == []


def test_refuse_dispatch_slicing_names_the_argument() -> None:
    refuse_dispatch_slicing(None)
    with pytest.raises(DataPrepareError, match="slice_fn_for_dispatch"):
        refuse_dispatch_slicing(lambda batch, rank: batch)


def test_collectives_in_one_process() -> None:
    assert any_process_flagged(True, torch.device("cpu")) is True
    assert any_process_flagged(False, torch.device("cpu")) is False
    data = torch.arange(4)
    assert torch.equal(gather_for_metrics(data, False, [], 1), data)
    assert gather_for_metrics([1, 2], False, [], 1) == [1, 2]
