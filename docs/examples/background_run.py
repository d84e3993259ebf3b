"""The background-run guide's example (docs/guides/background-runs.md), complete.

tests/docs/test_examples.py runs it: ``python docs/examples/background_run.py``.
"""

import torch

from notebook_accel import Accelerator, notebook_launcher


def train(config: dict) -> float:
    """A few steps of a linear model; logs its loss and returns the last one."""
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(data, batch_size=8))
    loss = torch.tensor(0.0)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.log({"train/loss": loss.item()})
    return loss.item()


if __name__ == "__main__":
    config = {"lr": 0.05}
    # --8<-- [start:example]
    run = notebook_launcher(train, args=(config,), num_processes=2, block=False)
    # --8<-- [end:example]
    # the cell returned at once; the run trains meanwhile
    final_loss = run.result(timeout=None)  # rank 0's value (or the run's WorkerError)
    assert run.status == "finished" and isinstance(final_loss, float), (run.status, final_loss)
    assert any("train/loss" in values for values in run.metrics)
    print("ok", run.status, final_loss)
