"""fp8 training (``mixed_precision="fp8"``) through torchao's float8 ``Linear``: what it needs (:mod:`.facts`,
torch-free), which layers convert (:mod:`.convert`), and an Accelerator's conversion (:mod:`.recipe`).

torchao is an optional extra (``pip install 'notebook-accel[fp8]'``); nothing here imports it until a model is
converted.
"""

from notebook_accel.float8.facts import FP8_LABEL, MIN_CAPABILITY, fp8_problems, precision_label, torchao_installed

__all__ = ["FP8_LABEL", "MIN_CAPABILITY", "fp8_problems", "precision_label", "torchao_installed"]
