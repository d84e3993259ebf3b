# %% [markdown]
# # 6. When things go wrong
#
# Distributed runs fail in ways a single process does not: one rank raises while the others wait for it, a
# collective that one rank never reaches hangs forever, a worker is killed by the system. This notebook causes each
# of them on purpose, shows what the cell ends with, and how to read it. Every failing cell below is *meant* to
# fail, and is tagged `raises-exception` so that *Run All* goes on past it.
#
# The promise in every case: the cell ends with **one** clear error, every worker has been stopped and reaped,
# and the next cell can launch again at once.

# %%
import multiprocessing
import os
import signal
import socket
import threading
import time

import torch
import torch.distributed as dist

from notebook_accel import Accelerator, WorkerError, notebook_launcher


def worker_processes_left():
    """How many child processes this kernel still has (the launcher's workers would be among them)."""
    if not os.path.isdir("/proc"):  # not Linux: count the children multiprocessing knows about
        return len(multiprocessing.active_children())
    me = str(os.getpid())
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += fields[1] == me
    return count


def press_stop_button():
    """What Jupyter's stop button does: SIGINT to the kernel's process group (or to the kernel alone)."""
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGINT)
    else:
        os.kill(os.getpid(), signal.SIGINT)

# %% [markdown]
# ## A rank raises
#
# Rank 1 divides by zero in the middle of training while rank 0 is busy (here: asleep). Without supervision rank 0
# would wait for rank 1 at its next collective, forever. The launcher notices the failure at once, stops rank 0,
# and raises a `WorkerError` in the cell:

# %%
def train_with_a_bug(steps):
    accelerator = Accelerator()
    for step in range(steps):
        if accelerator.process_index == 1 and step == 2:
            ratio = step / (step - 2)  # the bug
        time.sleep(0.1 if accelerator.process_index == 1 else 60)
    return "done"

# %% tags=["raises-exception"]
notebook_launcher(train_with_a_bug, args=(5,), num_processes=2)

# %% [markdown]
# How to read it:
#
# - the first line names the **rank** that failed and the original exception (`ZeroDivisionError: division by
#   zero`), not a wrapper of a wrapper,
# - the traceback below it is the failing worker's, limited to **your** frames (`train_with_a_bug`, the line of the
#   bug), not the launcher's internals,
# - rank 0 did not finish its 60-second sleep: it was stopped as soon as rank 1 failed.
#
# The same facts are attributes of the exception, for code that handles failures:

# %%
try:
    notebook_launcher(train_with_a_bug, args=(5,), num_processes=2)
except WorkerError as e:
    error = e

# %%
# NBVAL_CHECK_OUTPUT
print("failed rank:", error.rank)
print("exception:", error.failures[0].exc_type)
print("traceback mentions the bug:", "ratio = step / (step - 2)" in error.traceback)
print("worker processes left:", worker_processes_left())

# %% [markdown]
# `WorkerError` is a `RuntimeError`, and every error of the package is a `notebook_accel.NotebookAccelError`, so
# existing `except RuntimeError:` code keeps working.
#
# ## A worker dies without an exception
#
# A process can also vanish without a Python exception: the system's out-of-memory killer, a segfault in a C
# extension, or `os._exit` in a library. The launcher reports the exit code, or the name of the signal that ended it:

# %%
def train_that_dies():
    accelerator = Accelerator()
    if accelerator.process_index == 1:
        os._exit(7)
    time.sleep(60)

# %%
try:
    notebook_launcher(train_that_dies, num_processes=2)
except WorkerError as e:
    error = e

# %%
# NBVAL_CHECK_OUTPUT
print("failed rank:", error.rank, "| exit code:", error.exit_code)

# %% [markdown]
# ## A hang, and `timeout=`
#
# The classic distributed hang: one rank skips a collective the others enter. Here rank 0 waits in `all_reduce`
# for a partner that never comes. Nothing fails, so nothing would ever end the cell. `timeout=` (seconds) puts a
# bound on the whole run: when it expires the workers are stopped and the cell ends with a `LaunchTimeoutError`.

# %%
def train_that_hangs():
    accelerator = Accelerator()
    if accelerator.process_index == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    else:
        time.sleep(60)

# %% tags=["raises-exception"]
notebook_launcher(train_that_hangs, num_processes=2, timeout=5)

# %% [markdown]
# When a run hangs, look for a collective (`gather`, `reduce`, `wait_for_everyone`, the DDP gradient exchange in
# `backward`) that runs on some ranks only: code under `if accelerator.is_main_process:` that calls one, or ranks
# that see different numbers of batches. `show_all_ranks=True` shows every rank's output, not only the main
# process's, so you can see where each one stopped. Choose a `timeout=` a few times longer than the run should take.

# %% [markdown]
# ## The stop button
#
# The notebook's stop button (*Interrupt the kernel*) sends `SIGINT` to the kernel. While a launch runs, the
# launcher stops every worker within a few seconds, restores the kernel's signal handlers and lets the
# `KeyboardInterrupt` end the cell, as in any other interrupted cell.
#
# A notebook cannot press its own stop button, so the next cell sends the same signal from a timer
# (`press_stop_button`, defined at the top), two seconds into a run that would otherwise take a minute:

# %%
def long_training():
    Accelerator()
    time.sleep(60)


started = time.monotonic()
threading.Timer(2.0, press_stop_button).start()
try:
    notebook_launcher(long_training, num_processes=2)
    outcome = "finished (the stop button was not pressed?)"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt, as after pressing the stop button"
seconds = time.monotonic() - started

# %%
# NBVAL_CHECK_OUTPUT
print(outcome)
print("stopped within 15 seconds:", seconds < 15)
print("worker processes left:", worker_processes_left())

# %% [markdown]
# The kernel is still usable, and the next launch works at once:

# %%
again = notebook_launcher(lambda: Accelerator().num_processes, num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
print("processes in the next launch:", again)

# %% [markdown]
# ## Refused before anything starts
#
# Some mistakes are caught before any worker is forked, with a `LaunchError` (a `ValueError`) that names the bad
# value and the fix. Nothing was started, so there is nothing to clean up. A port that another program holds:

# %% tags=["raises-exception"]
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen()
try:
    notebook_launcher(lambda: None, num_processes=2, use_port=busy.getsockname()[1])
finally:
    busy.close()

# %% [markdown]
# Pass another `use_port=`, or leave it out to let the launcher pick a free one.
#
# The one refusal that needs more than a new argument: **CUDA initialised in the kernel.** Processes forked from
# a kernel that has used CUDA cannot use CUDA themselves, so if the notebook touched a GPU before the launch
# (`model.cuda()`, `torch.cuda.get_device_name()`, ...), `notebook_launcher` raises `CudaInitializedError` and asks
# you to **restart the kernel**, then keep all GPU work inside the training function. (This machine has no GPU,
# so the notebook cannot show it.)
#
# ## Summary
#
# | what happened | the cell ends with | read |
# | --- | --- | --- |
# | a rank raised | `WorkerError` | the first line (rank, exception) and the traceback of your code |
# | a worker died | `WorkerError` | the exit code or signal (`SIGKILL` is often the out-of-memory killer) |
# | a hang | `LaunchTimeoutError` after `timeout=` seconds | which collective some rank never reached |
# | the stop button | `KeyboardInterrupt` | nothing: the workers are gone, launch again |
# | a bad argument, a busy port | `LaunchError` before any fork | the message: the value and the fix |
# | CUDA used in the kernel | `CudaInitializedError` | restart the kernel, keep GPU work in the function |
