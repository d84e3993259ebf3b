"""The fp8 guide's example (docs/guides/fp8.md): the Accelerator for a GPU with fp8, or torchao's emulation.

tests/docs/test_examples.py runs it (emulated, on the CPU; needs the fp8 extra):
``python docs/examples/fp8_emulated.py``.
"""

import torch

# --8<-- [start:example]
from notebook_accel import Accelerator, AORecipeKwargs
from torchao.float8 import Float8LinearConfig


def fp8_accelerator(gpu_has_fp8: bool) -> Accelerator:
    if gpu_has_fp8:                                          # an H100/H200, L4/L40S, RTX 4090, B200...
        return Accelerator(mixed_precision="fp8")
    return Accelerator(mixed_precision="fp8",                # anywhere, slowly: torchao's emulation
                       kwargs_handlers=[AORecipeKwargs(config=Float8LinearConfig(emulate=True))])
# --8<-- [end:example]


if __name__ == "__main__":
    accelerator = fp8_accelerator(gpu_has_fp8=False)
    # three layers: torchao keeps the first and the last Linear in high precision, the middle one is float8
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    converted = [type(m).__name__ for m in accelerator.unwrap_model(model).modules()]
    assert "Float8Linear" in converted, converted
    loss = accelerator.unwrap_model(model)(torch.randn(16, 32)).float().pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    print("ok", converted)
