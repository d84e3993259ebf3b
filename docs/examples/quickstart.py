"""The front page's example (README.md and docs/index.md), complete: ``python docs/examples/quickstart.py``.

tests/docs/test_examples.py runs it, and checks that the README shows the lines between the snippet markers.
"""

import torch

from notebook_accel import Accelerator, notebook_launcher


_built: list = []  # the model build_model() made last in this process, for build_optimizer(lr)


def build_model() -> torch.nn.Module:
    """A small regression model."""
    _built[:] = [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))]
    return _built[0]


def build_optimizer(lr: float) -> torch.optim.Optimizer:
    """AdamW over the parameters of the model ``build_model()`` just built."""
    return torch.optim.AdamW(_built[0].parameters(), lr=lr)


def build_loader() -> torch.utils.data.DataLoader:
    """64 random examples in batches of 8."""
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=generator),
                                          torch.randn(64, 1, generator=generator))
    return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)


loss_fn = torch.nn.functional.mse_loss


def evaluate(model: torch.nn.Module) -> dict:
    """The model's loss on a fixed batch."""
    x, y = torch.ones(4, 8), torch.zeros(4, 1)
    with torch.no_grad():
        return {"loss": float(loss_fn(model(x), y))}


def main() -> None:
    """Run the example and check what comes back."""
    # --8<-- [start:example]
    def train(lr):
        accelerator = Accelerator()                         # the accelerate API you already know
        model, optimizer, loader = accelerator.prepare(build_model(), build_optimizer(lr), build_loader())
        for x, y in loader:
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            accelerator.log({"train/loss": loss.item()})    # -> live curve in the dashboard
        return evaluate(model)                              # rank 0's return value comes back to the cell

    result = notebook_launcher(train, args=(3e-4,), num_processes=2)
    # --8<-- [end:example]
    assert set(result) == {"loss"}, result
    print("ok", result)


if __name__ == "__main__":
    main()
