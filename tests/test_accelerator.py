"""The Accelerator facade in one process: construction, prepare, step semantics, helpers, integrations.

Real 2-process behaviour lives in tests/distributed/.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import (
    Accelerator,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    DistributedType,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProjectConfiguration,
)
from notebook_accel.data import PreparedDataLoader
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.plugins import ConfigurationError
from notebook_accel.scheduler import AcceleratedScheduler


def test_defaults_and_properties() -> None:
    acc = Accelerator()
    assert acc.distributed_type is DistributedType.NO and acc.device.type == "cpu"
    assert (acc.process_index, acc.local_process_index, acc.num_processes) == (0, 0, 1)
    assert acc.is_main_process and acc.is_local_main_process and acc.is_last_process and not acc.use_distributed
    assert (acc.mixed_precision, acc.gradient_accumulation_steps, acc.sync_gradients) == ("no", 1, True)
    assert not acc.split_batches and acc.even_batches and acc.scaler is None and acc.step == 0
    assert acc.project_dir is None and acc.logging_dir is None and not acc.optimizer_step_was_skipped
    assert "NO" in repr(acc) and acc.trackers == []


def test_launch_environment_fills_what_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS", "4")
    acc = Accelerator()
    assert (acc.mixed_precision, acc.gradient_accumulation_steps) == ("bf16", 4)
    explicit = Accelerator(mixed_precision="no", gradient_accumulation_steps=2)
    assert (explicit.mixed_precision, explicit.gradient_accumulation_steps) == ("no", 2)
    monkeypatch.setenv("NOTEBOOK_ACCEL_MIXED_PRECISION", "fp4")
    with pytest.raises(ConfigurationError, match="launch config"):
        Accelerator()


def test_options_are_honoured() -> None:
    acc = Accelerator(split_batches=True, project_dir="runs", mixed_precision="fp16",
                      gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=3, sync_each_batch=True),
                      kwargs_handlers=[GradScalerKwargs(init_scale=8.0), DistributedDataParallelKwargs(),
                                       InitProcessGroupKwargs(backend="gloo")])
    assert acc.split_batches and acc.dataloader_config.split_batches
    assert acc.project_dir == "runs" and acc.logging_dir == "runs"
    assert acc.scaler is not None and acc.scaler.get_scale() == 8.0
    assert acc.gradient_accumulation_steps == 3 and acc.gradient_state.sync_each_batch
    same = Accelerator(split_batches=False, dataloader_config=DataLoaderConfiguration(split_batches=False),
                       project_config=ProjectConfiguration(project_dir="a"), project_dir="b")
    assert not same.split_batches and same.project_dir == "a"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mixed_precision": "fp4"}, "allowed: no, fp16, bf16, fp8"),
        ({"split_batches": False, "dataloader_config": DataLoaderConfiguration(split_batches=True)}, "conflicts"),
        ({"gradient_accumulation_steps": 2,
          "gradient_accumulation_plugin": GradientAccumulationPlugin(num_steps=3)}, "disagree"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0 is not allowed"),
        ({"kwargs_handlers": [object()]}, "not handlers"),
        ({"kwargs_handlers": [GradScalerKwargs(), GradScalerKwargs()]}, "two GradScalerKwargs"),
    ],
)
def test_constructor_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Accelerator(**kwargs)


def test_even_batches_argument_is_a_type_error_as_in_accelerate() -> None:
    with pytest.raises(TypeError):
        Accelerator(even_batches=False)  # type: ignore[call-arg]


def _parts() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, DataLoader]:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    return model, optimizer, scheduler, DataLoader(torch.ones(10, 2), batch_size=2)


def test_prepare_order_types_and_passthrough() -> None:
    acc = Accelerator()
    model, optimizer, scheduler, loader = _parts()
    out = acc.prepare(scheduler, "text", loader, optimizer, model)  # scheduler first: still wraps the optimizer
    assert isinstance(out[0], AcceleratedScheduler) and out[1] == "text"
    assert isinstance(out[2], PreparedDataLoader) and isinstance(out[3], AcceleratedOptimizer) and out[4] is model
    assert out[0].optimizers == [out[3]]
    again = acc.prepare(out[4], out[3], out[2])
    assert again == (out[4], out[3], out[2])
    assert (len(acc._models), len(acc._optimizers), len(acc._dataloaders), len(acc._schedulers)) == (1, 1, 1, 1)
    assert acc.prepare(model) is model  # one object: not a tuple
    with pytest.raises(ConfigurationError, match="device_placement has 1 entries for 2 objects"):
        acc.prepare(model, optimizer, device_placement=[True])


def test_accumulation_sync_pattern_and_flush() -> None:
    acc = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, _, loader = _parts()
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(torch.ones(10, 2), batch_size=2))
    flags, grads = [], []
    for epoch in range(2):
        for x in loader:
            with acc.accumulate(model):
                acc.backward(model(x).sum())
                grads.append(model.bias.grad.item())
                optimizer.step()
                optimizer.zero_grad()
            flags.append(acc.sync_gradients)
    assert flags == [False, True, False, True, True] * 2  # 5 batches: the last one flushes
    assert grads[:2] == [1.0, 2.0]  # each backward adds sum/2 over a batch of 2
    assert acc.step == 0


def test_setting_gradient_accumulation_steps_changes_the_sync_pattern_and_the_loss_scale() -> None:
    # accelerate's automatic_gradient_accumulation example sets it after find_executable_batch_size halved the batch
    acc = Accelerator()
    model, optimizer, _, _ = _parts()
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(torch.ones(8, 2), batch_size=2))
    acc.gradient_accumulation_steps = 3
    assert acc.gradient_accumulation_steps == 3 == acc.gradient_state.num_steps
    flags, grads = [], []
    for x in loader:
        with acc.accumulate(model):
            acc.backward(model(x).sum())
            grads.append(model.bias.grad.item())
            optimizer.step()
            optimizer.zero_grad()
        flags.append(acc.sync_gradients)
    assert flags == [False, False, True, True]  # every 3rd batch, and the loader's last one
    assert grads[:3] == pytest.approx([2 / 3, 4 / 3, 2.0])  # each backward adds sum/3 over a batch of 2
    for bad in (0, -2, 2.5, "4", True, None):
        with pytest.raises(ConfigurationError, match=r"gradient_accumulation_steps = .*whole number >= 1"):
            acc.gradient_accumulation_steps = bad  # type: ignore[assignment]
    assert acc.gradient_accumulation_steps == 3


def test_clip_and_unscale_without_fp16() -> None:
    acc = Accelerator()
    model, optimizer, *_ = _parts()
    model, optimizer = acc.prepare(model, optimizer)
    acc.backward(model(torch.ones(1, 2)).sum() * 100)
    norm = acc.clip_grad_norm_(model.parameters(), 1.0)
    assert norm.item() > 1.0 and torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]) <= 1.0 + 1e-6
    acc.clip_grad_value_(model.parameters(), 0.1)
    assert all(p.grad.abs().max() <= 0.1 for p in model.parameters())
    acc.unscale_gradients()


def test_contexts_and_collectives_in_one_process() -> None:
    acc = Accelerator(mixed_precision="bf16")
    with acc.autocast():
        assert torch.nn.Linear(1, 1)(torch.ones(1, 1)).dtype == torch.bfloat16
    model = acc.prepare(torch.nn.Linear(1, 1))
    with acc.no_sync(model):
        pass
    t = torch.arange(3)
    assert acc.gather(t) is t and acc.reduce(t) is t and acc.broadcast(t) is t
    assert acc.pad_across_processes(t) is t and acc.gather_object(["a"]) == ["a"]
    assert acc.gather_for_metrics(t) is t and acc.gather_for_metrics(["a", "b"]) == ["a", "b"]
    loader = acc.prepare(DataLoader(list(range(5)), batch_size=2))
    assert [acc.gather_for_metrics(b).tolist() for b in loader] == [[0, 1], [2, 3], [4]]


def test_process_helpers(capsys: pytest.CaptureFixture[str]) -> None:
    acc = Accelerator()
    acc.print("hi")
    assert capsys.readouterr().out == "hi\n"
    assert acc.on_main_process(lambda: 1)() == 1 and acc.on_local_main_process(lambda: 2)() == 2
    assert acc.on_last_process(lambda: 3)() == 3 and acc.on_process(process_index=0)(lambda: 4)() == 4
    with acc.main_process_first(), acc.local_main_process_first():
        acc.wait_for_everyone()
    with acc.split_between_processes([1, 2, 3]) as part:
        assert part == [1, 2, 3]


def test_save_free_memory_seed_skip(tmp_path: Any) -> None:
    acc = Accelerator()
    model, optimizer, _, loader = _parts()
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    acc.save({"a": 1}, tmp_path / "obj.pt")
    assert torch.load(tmp_path / "obj.pt") == {"a": 1}
    assert acc.unwrap_model(model) is model
    assert set(acc.get_state_dict(model)) == {"weight", "bias"}
    assert len(acc.skip_first_batches(loader, 4)) == 1
    acc.set_seed(1)
    a = torch.rand(1)
    acc.set_seed(1, device_specific=True)
    assert torch.equal(a, torch.rand(1))
    assert acc.free_memory(model, optimizer) == [None, None] and acc._models == [] and acc.release_memory() == []


def test_two_accelerators_in_one_process() -> None:
    first, second = Accelerator(), Accelerator(mixed_precision="bf16")
    assert first.state is not second.state and first.mixed_precision == "no"


def test_tracking_contract(tmp_path: Any) -> None:
    acc = Accelerator(log_with="jsonl", project_dir=str(tmp_path))
    acc.init_trackers("run", config={"lr": 0.1})
    acc.log({"loss": 1.0}, step=0)
    assert [t.name for t in acc.trackers] == ["jsonl"] and acc.get_tracker("jsonl").name == "jsonl"
    acc.end_training()
    assert any(tmp_path.rglob("*.jsonl"))


def test_checkpoint_contract(tmp_path: Any) -> None:
    acc = Accelerator()
    model, optimizer, scheduler, loader = acc.prepare(*_parts())
    counter = torch.nn.Linear(1, 1)
    acc.register_for_checkpointing(counter)
    it = iter(loader)
    next(it)
    path = acc.save_state(str(tmp_path / "ckpt"))
    rest = [b.tolist() for b in it]
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    acc.load_state(path)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert [b.tolist() for b in loader] == rest
    with pytest.raises(TypeError):
        acc.register_for_checkpointing(42)
    assert acc.save_model(model, str(tmp_path / "export"))


@pytest.mark.parametrize(("f", "safe", "obj", "error", "match"), [
    (None, False, {"w": torch.ones(1)}, TypeError, r"save\(f=\.\.\.\): got None"),  # was AttributeError from torch
    ("{tmp}", False, {"w": torch.ones(1)}, ValueError, "is a folder"),  # was RuntimeError: Is a directory
    ("{tmp}/missing/w.pt", False, {"w": torch.ones(1)}, ValueError, "which is no folder"),  # RuntimeError
    (None, True, {"w": torch.ones(1)}, TypeError, r"save\(f=\.\.\.\)"),  # TypeError: argument 'filename'
    ("{tmp}/w.st", True, [torch.ones(1)], TypeError, r"save\(obj=.*dict of name to tensor"),  # AttributeError
    ("{tmp}/w.pt", "yes", {"w": torch.ones(1)}, TypeError, r"safe_serialization='yes'"),
])
def test_save_refuses_what_it_cannot_write(tmp_path: Any, f: Any, safe: Any, obj: Any, error: type[Exception],
                                           match: str) -> None:
    target = f.format(tmp=tmp_path) if isinstance(f, str) else f
    with pytest.raises(error, match=match):
        Accelerator(cpu=True).save(obj, target, safe_serialization=safe)
    assert [p.name for p in tmp_path.iterdir()] == []


def test_save_names_a_file_it_cannot_open(tmp_path: Any) -> None:
    """A text-mode or read-only file object, a name too long and an unwritable place fail as errors naming ``f``
    or the path (were a TypeError about a memoryview, a bare ``UnsupportedOperation: write`` and torch's or
    safetensors' ``[enforce fail at inline_container.cc]`` RuntimeError / SafetensorError)."""
    accelerator = Accelerator(cpu=True)
    weights = {"w": torch.ones(1)}
    (tmp_path / "r.bin").write_bytes(b"")
    with open(tmp_path / "t.txt", "w") as text, pytest.raises(TypeError, match=r"save\(f=.*binary mode"):
        accelerator.save(weights, text)
    with open(tmp_path / "r.bin", "rb") as read_only, pytest.raises(ValueError, match="not open for writing"):
        accelerator.save(weights, read_only)
    for safe in (False, True):
        with pytest.raises(OSError, match="File name too long: '.*/aaa"):
            accelerator.save(weights, str(tmp_path / ("a" * 300)), safe_serialization=safe)
        with pytest.raises(OSError, match="/proc/notebook-accel.pt"):
            accelerator.save(weights, "/proc/notebook-accel.pt", safe_serialization=safe)


def test_an_accelerator_with_prepared_loaders_pickles_and_its_loaders_still_ask_it() -> None:
    """accelerate's test_pickle_accelerator: the loaders' train/eval probe (which holds the Accelerator weakly)
    must pickle too, and after a round trip ask the copy."""
    import pickle

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.prepare(DataLoader(list(range(4)), batch_size=2), DataLoader(list(range(4)), batch_size=2))
    model.eval()
    copy = pickle.loads(pickle.dumps(accelerator))
    assert [loader.progress_name() for loader in copy._dataloaders] == ["eval", "eval"]
    copy._models[0].train()
    assert [loader.progress_name() for loader in copy._dataloaders] == ["train", "train"]
