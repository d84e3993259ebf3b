"""Option objects: accelerate's fields and defaults, validation errors, to_kwargs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from notebook_accel.errors import NotebookAccelError
from notebook_accel.kwargs_handlers import (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from notebook_accel.plugins import (
    ConfigurationError,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    ProjectConfiguration,
)


def test_defaults_match_accelerate() -> None:
    dl = DataLoaderConfiguration()
    assert (dl.split_batches, dl.dispatch_batches, dl.even_batches, dl.use_seedable_sampler, dl.data_seed,
            dl.non_blocking) == (False, None, True, False, None, False)
    pc = ProjectConfiguration()
    assert (pc.project_dir, pc.logging_dir, pc.automatic_checkpoint_naming, pc.total_limit, pc.iteration) == (
        None, None, False, None, 0)
    ga = GradientAccumulationPlugin(num_steps=2)
    assert (ga.adjust_scheduler, ga.sync_with_dataloader, ga.sync_each_batch) == (True, True, False)
    gs = GradScalerKwargs()
    assert (gs.init_scale, gs.growth_factor, gs.backoff_factor, gs.growth_interval, gs.enabled) == (
        65536.0, 2.0, 0.5, 2000, True)
    assert InitProcessGroupKwargs().to_kwargs() == {}


def test_project_configuration_directories() -> None:
    assert ProjectConfiguration(project_dir="a").logging_dir == "a"
    assert ProjectConfiguration(project_dir="a", logging_dir="b").logging_dir == "b"
    pc = ProjectConfiguration()
    pc.set_directories("x")
    assert (pc.project_dir, pc.logging_dir) == ("x", "x")


def test_to_kwargs_only_changed_fields() -> None:
    assert DistributedDataParallelKwargs(find_unused_parameters=True).to_kwargs() == {"find_unused_parameters": True}
    assert GradScalerKwargs(init_scale=8.0).to_kwargs() == {"init_scale": 8.0}
    assert InitProcessGroupKwargs(timeout=timedelta(seconds=5)).to_kwargs() == {"timeout": timedelta(seconds=5)}


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: DataLoaderConfiguration(split_batches="yes"), "split_batches='yes'"),
        (lambda: DataLoaderConfiguration(dispatch_batches="yes"), "dispatch_batches='yes'"),
        (lambda: DataLoaderConfiguration(data_seed=-1), "data_seed"),
        (lambda: DataLoaderConfiguration(data_seed=1.5), "data_seed"),
        (lambda: ProjectConfiguration(project_dir=3), "project_dir"),
        (lambda: ProjectConfiguration(total_limit=0), "total_limit"),
        (lambda: ProjectConfiguration(iteration=-1), "iteration"),
        (lambda: ProjectConfiguration(automatic_checkpoint_naming=True), "project_dir"),
        (lambda: ProjectConfiguration(automatic_checkpoint_naming="x"), "automatic_checkpoint_naming"),
        (lambda: GradientAccumulationPlugin(), "num_steps is required"),
        (lambda: GradientAccumulationPlugin(num_steps=0), "num_steps"),
        (lambda: GradientAccumulationPlugin(num_steps=True), "num_steps"),
        (lambda: GradientAccumulationPlugin(num_steps=2, sync_each_batch=1), "sync_each_batch"),
        (lambda: DistributedDataParallelKwargs(bucket_cap_mb=0), "bucket_cap_mb"),
        (lambda: DistributedDataParallelKwargs(static_graph="no"), "static_graph"),
        (lambda: GradScalerKwargs(init_scale=0), "init_scale"),
        (lambda: GradScalerKwargs(init_scale="big"), "init_scale"),
        (lambda: GradScalerKwargs(backoff_factor=2.0), "backoff_factor"),
        (lambda: GradScalerKwargs(growth_interval=0), "growth_interval"),
        (lambda: GradScalerKwargs(enabled=None), "enabled"),
        (lambda: InitProcessGroupKwargs(backend="tcp"), "allowed: gloo, nccl, mpi"),
        (lambda: InitProcessGroupKwargs(init_method=5), "init_method"),
        (lambda: InitProcessGroupKwargs(timeout=30), "timedelta"),
        (lambda: InitProcessGroupKwargs(timeout=timedelta(seconds=0)), "positive"),
    ],
)
def test_validation_errors(factory: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        factory()
    assert isinstance(info.value, NotebookAccelError) and isinstance(info.value, ValueError)
