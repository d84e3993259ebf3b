"""One process, no launcher: ``python -m tests.engines.deepspeed.one_process <mixed_precision> <zero_stage>`` trains a
linear model 4 steps under DeepSpeed and prints ``OK <loss> <parameter dtype>`` (run in a subprocess by the tests,
since DeepSpeed's one-process group stays for the life of the process)."""

from __future__ import annotations

import atexit
import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.utils import DummyOptim, DummyScheduler


def main(mixed_precision: str, stage: int) -> None:
    """Train and print the last loss and the parameters' dtype."""
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision,
                              deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x).float(), y)  # float inputs: the forward autocasts to bf16
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print("OK", loss.item(), next(model.parameters()).dtype, flush=True)
    atexit._run_exitfuncs()  # what the interpreter runs at exit: the one-process group must go there
    print("group after exit functions:", torch.distributed.is_initialized(), flush=True)


def _error(plugin: DeepSpeedPlugin, *objects: str) -> str:
    """The error ``prepare`` raises for ``objects`` (``"model"``, ``"optimizer"``, ``"loader"``) in one call."""
    accelerator = Accelerator(cpu=True, deepspeed_plugin=plugin)
    model = torch.nn.Linear(4, 1)
    made = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loader": DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)}
    try:
        accelerator.prepare(*(made[name] for name in objects))
    except Exception as e:  # noqa: BLE001 - printed for the test
        return f"{type(e).__name__}: {e}"
    return "prepared"


def errors() -> None:
    """One line per refused ``prepare``."""
    print(_error(DeepSpeedPlugin(), "optimizer", "loader"))
    print(_error(DeepSpeedPlugin(), "model", "optimizer"))
    with_optimizer = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}
    print(_error(DeepSpeedPlugin(hf_ds_config=with_optimizer), "model", "optimizer"))
    print(_error(DeepSpeedPlugin(zero_stage=3, transformer_moe_cls_names="Expert"), "model", "optimizer", "loader"))


def dummies() -> None:
    """Train with the optimizer and scheduler the config defines (DummyOptim/DummyScheduler); print one JSON line."""
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
              "zero_allow_untested_optimizer": True,  # DeepSpeed asks it for an optimizer outside its own list
              "optimizer": {"type": "SGD", "params": {"lr": "auto", "weight_decay": "auto"}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                           "warmup_num_steps": "auto", "warmup_type": "linear"}}}
    accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    assert accelerator.state.deepspeed_plugin is not None
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = DummyOptim(model.parameters(), lr=0.05, weight_decay=0.0)
    scheduler = DummyScheduler(optimizer, total_num_steps=8, warmup_num_steps=4)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses, lrs = [], []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        lrs.append(scheduler.get_last_lr()[0])
    print(json.dumps({"optimizer": type(optimizer.optimizer).__name__, "inner": type(model.optimizer).__name__,
                      "scheduler": type(scheduler.scheduler).__name__, "lrs": lrs, "losses": losses,
                      "weight_decay": optimizer.param_groups[0]["weight_decay"]}), flush=True)


def dummy_errors() -> None:
    """One line per refused dummy."""
    for config, objects in (({"train_micro_batch_size_per_gpu": 4}, ("optimizer",)),
                            ({"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}},
                             ("optimizer", "scheduler"))):
        accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
        model = torch.nn.Linear(4, 1)
        optimizer = DummyOptim(model.parameters())
        made = {"optimizer": optimizer, "scheduler": DummyScheduler(optimizer)}
        try:
            accelerator.prepare(model, *(made[name] for name in objects))
            print("prepared")
        except Exception as e:  # noqa: BLE001 - printed for the test
            print(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    if sys.argv[1] == "errors":
        errors()
    elif sys.argv[1] in ("dummies", "dummy_errors"):
        {"dummies": dummies, "dummy_errors": dummy_errors}[sys.argv[1]]()
    else:
        main(sys.argv[1], int(sys.argv[2]))
