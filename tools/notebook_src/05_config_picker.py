# %% [markdown]
# # 5. Choosing a configuration: the picker, the YAML file, the command line
#
# How a run is spread over the machine (processes, GPUs, mixed precision, gradient accumulation, ports, machines)
# is a choice you make once, save, and reuse from notebooks and scripts. notebook-accel keeps it in one YAML file
# whose field names are those of accelerate's config file, so a file written by `accelerate config` loads too.
#
# The same configuration has three faces: a `Config` object in Python, the **config picker** widget in a notebook,
# and the `notebook-accel` command line. This notebook uses all three and launches with the result.

# %%
import os
import re
import shutil
import subprocess
import sys

from notebook_accel import Accelerator, Config, load_config, notebook_launcher
from notebook_accel.config import save_config
from notebook_accel.widgets import ConfigPicker

workdir = "tutorial-05-files"  # config files go here, beside the notebook (removed at the end); a relative name
shutil.rmtree(workdir, ignore_errors=True)  # what an interrupted earlier run left
os.makedirs(workdir)

# %% [markdown]
# ## The config picker
#
# `ConfigPicker()` shows a form built from this machine's hardware: the CPU cores and, if there are any, the GPUs
# with their names and memory (found without initialising CUDA in the kernel, which would make every later launch
# fail). Its controls only offer what the hardware supports, the effective batch size follows the per-device batch
# size, the number of processes and the accumulation, and an impossible combination shows a message under the form
# instead of raising. *Save* and *Load* use the path field.
#
# `ConfigPicker()` starts from your default config file, if you have one. Here we start it from the defaults,
# `Config()`, so that the notebook shows the same on every machine.

# %%
picker = ConfigPicker(Config(), path=os.path.join(workdir, "picked.yaml"))
picker

# %% [markdown]
# In a live notebook you would click. Here we set the controls from code, which is exactly what a click does
# (the controls are public attributes: `device`, `processes`, `mixed_precision`, `accumulation`, `batch_size`,
# `port`, `machines`, ...). Scroll up: the form above follows.

# %%
picker.device.value = "CPU"
picker.processes.value = 2
picker.mixed_precision.value = "bf16"
picker.accumulation.value = 2
picker.batch_size.value = 32

# %% [markdown]
# `picker.config` is the validated `Config` the form describes, and `picker.save()` writes it (the *Save* button):

# %%
# NBVAL_CHECK_OUTPUT
picked = picker.config
print(picked.distributed_type, picked.num_processes, picked.mixed_precision, picked.gradient_accumulation_steps)
print(re.sub("<[^>]+>", "", picker.effective.value))
saved_path = picker.save()

# %% [markdown]
# ## The same thing in code
#
# `Config` is a frozen dataclass. Building one validates every field; `distributed_type` follows from the other
# fields when you leave it out.

# %%
# NBVAL_CHECK_OUTPUT
config = Config(num_processes=2, use_cpu=True, mixed_precision="bf16", gradient_accumulation_steps=2)
print(config.distributed_type, config.num_processes, config.mixed_precision, config.gradient_accumulation_steps)

# %% [markdown]
# A bad configuration is refused with **every** problem at once, each naming the field, the bad value and what is
# allowed, so you fix them all in one go:

# %% tags=["raises-exception"]
Config(num_processes=0, mixed_precision="fp4", gradient_accumulation_steps=-1)

# %% [markdown]
# ## Save it, load it
#
# `save_config` writes the YAML file (the picker has a *Save* button that does the same); `load_config` reads it
# back, or a file written by accelerate.

# %%
path = os.path.join(workdir, "two_cpus_bf16.yaml")
save_config(config, path)
with open(path) as f:
    print(f.read())

# %%
# NBVAL_CHECK_OUTPUT
print("round trip gives the same config:", load_config(path) == config)

# %% [markdown]
# A file from `accelerate config` loads as it is. Settings that accelerate knows but notebook-accel does not use
# (DeepSpeed, FSDP, ...) are kept when the file is saved again, with one warning; a misspelt key is an error with a
# suggestion.

# %%
# NBVAL_CHECK_OUTPUT
accelerate_file = os.path.join(workdir, "from_accelerate.yaml")
with open(accelerate_file, "w") as f:
    f.write(
        "compute_environment: LOCAL_MACHINE\n"
        "distributed_type: MULTI_CPU\n"
        "mixed_precision: 'no'\n"
        "num_machines: 1\n"
        "num_processes: 2\n"
        "machine_rank: 0\n"
        "use_cpu: true\n"
        "main_training_function: main\n"
        "downcast_bf16: 'no'\n"
    )
print(load_config(accelerate_file).num_processes, "processes, from an accelerate file")

# %% tags=["raises-exception"]
with open(accelerate_file, "a") as f:
    f.write("num_proceses: 4\n")
load_config(accelerate_file)

# %% [markdown]
# ## Launch with it
#
# `notebook_launcher(train, config=...)` takes a `Config`, a path to a YAML file, or the picker itself. The
# workers' `Accelerator()` picks up the mixed precision and the accumulation from it, with nothing written in the
# function. An argument given explicitly wins over the config, and the config over the defaults.

# %%
def report():
    accelerator = Accelerator()
    return {
        "processes": accelerator.num_processes,
        "distributed_type": accelerator.distributed_type.value,
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
    }

# %%
from_file = notebook_launcher(report, config=path)

# %%
# NBVAL_CHECK_OUTPUT
print(from_file)

# %%
overridden = notebook_launcher(report, config=path, mixed_precision="no")

# %%
# NBVAL_CHECK_OUTPUT
print(overridden)

# %% [markdown]
# And with the picker from the top of the notebook (its current values are used at the moment of the launch):

# %%
from_picker = notebook_launcher(report, config=picker)

# %%
# NBVAL_CHECK_OUTPUT
print(from_picker)

# %% [markdown]
# With no `config=`, the launcher looks for a file in this order: `$NOTEBOOK_ACCEL_CONFIG_FILE`, then
# `~/.config/notebook_accel/config.yaml` (written by `notebook-accel config`), then accelerate's
# `~/.cache/huggingface/accelerate/default_config.yaml`, and otherwise uses the defaults.
#
# ## The command line
#
# The `notebook-accel` command (installed with the package) works on the same files: `config` asks a few questions
# (or writes a default for this machine with `--default`), `env` prints what a bug report needs, `test` runs a
# two-process check, and `launch` runs a **script** on several processes through torch's own launcher
# (`torch.distributed.run`), for when training moves out of the notebook.

# %%
cli = os.path.join(os.path.dirname(sys.executable), "notebook-accel")
print(subprocess.run([cli, "--help"], capture_output=True, text=True).stdout)

# %%
print(subprocess.run([cli, "env", "--config_file", saved_path], capture_output=True, text=True).stdout)

# %%
shutil.rmtree(workdir)
