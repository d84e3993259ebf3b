"""The configuration guide's example (docs/guides/configuration.md): a launch from the YAML file beside this one.

tests/docs/test_examples.py runs it: ``python docs/examples/config_file.py``.
"""

import os
from pathlib import Path

# --8<-- [start:example]
from notebook_accel import load_config, notebook_launcher
# --8<-- [end:example]


def train() -> tuple:
    """What the workers were given by the config."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    return accelerator.num_processes, accelerator.mixed_precision, accelerator.gradient_accumulation_steps


if __name__ == "__main__":
    os.chdir(Path(__file__).parent)  # where run.yaml, the file the guide shows, is
    assert load_config("run.yaml").num_processes == 2
    # --8<-- [start:launch]
    result = notebook_launcher(train, config="run.yaml")     # or a Config, or a ConfigPicker
    # --8<-- [end:launch]
    assert result == (2, "bf16", 2), result
    print("ok", result)
