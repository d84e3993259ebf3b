"""Worker tracebacks name notebook cells as IPython does (``Cell In[1]``), not IPython's temporary files."""

from __future__ import annotations


import pytest

from notebook_accel.cell_names import cell_names, rename_cells, short_locations, without_build_paths
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher


def test_known_files_are_renamed_and_others_kept() -> None:
    text = ('  File "/tmp/ipykernel_7/3049281213.py", line 5, in train\n'
            '  File "/usr/lib/python3/x.py", line 9, in helper\n')
    renamed = rename_cells(text, lambda f: ("Cell", "In[6]") if "ipykernel_7" in f else None)
    assert renamed == '  Cell In[6], line 5, in train\n  File "/usr/lib/python3/x.py", line 9, in helper\n'


def test_outside_ipython_nothing_changes() -> None:
    text = '  File "/tmp/ipykernel_7/1.py", line 5, in train'
    assert cell_names(text) == text


@pytest.mark.timeout(120)
def test_a_worker_failure_names_the_cell(shell: object) -> None:
    code = "def broken():\n    raise ValueError('from a cell')\n"
    result = shell.run_cell(code, store_history=True)  # type: ignore[attr-defined]
    assert result.success
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(shell.user_ns["broken"], num_processes=2, dashboard=False)  # type: ignore[attr-defined]
    message = str(caught.value)
    assert "Cell In[1], line 2, in broken" in message, message
    assert "ipykernel" not in message and '.py", line 2' not in message


def test_a_warnings_location_is_renamed_too() -> None:
    text = "/tmp/ipykernel_7/42.py:5: UserWarning: careful\n  warnings.warn('careful')\n/usr/lib/x.py:3: Other"
    renamed = rename_cells(text, lambda f: ("Cell", "In[6]") if "ipykernel_7" in f else None)
    assert renamed == "Cell In[6], line 5: UserWarning: careful\n  warnings.warn('careful')\n/usr/lib/x.py:3: Other"


@pytest.mark.timeout(120)
def test_a_traceback_or_warning_a_worker_prints_itself_names_the_cell(shell: object,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    code = ("import sys, traceback, warnings\n"
            "def noisy():\n"
            "    warnings.warn('careful')\n"
            "    traceback.print_stack(file=sys.stderr)\n")
    assert shell.run_cell(code, store_history=True).success  # type: ignore[attr-defined]
    shown_as_python_does = "lambda *w: sys.stderr.write(warnings.formatwarning(*w[:4]))"  # pytest records them
    assert shell.run_cell(f"warnings.showwarning = {shown_as_python_does}").success  # type: ignore[attr-defined]
    noisy = shell.user_ns["noisy"]  # type: ignore[attr-defined]
    notebook_launcher(noisy, num_processes=2, dashboard=False, show_all_ranks=True)
    printed = capfd.readouterr()
    shown = printed.out + printed.err
    assert "Cell In[1], line 3: UserWarning: careful" in shown, shown
    assert "Cell In[1], line 4, in noisy" in shown and "ipython-input" not in shown, shown


@pytest.mark.timeout(120)
def test_a_hang_in_a_cell_names_the_cells_lines(shell: object) -> None:
    code = ("import time\n"
            "def stuck():\n"
            "    from notebook_accel import Accelerator\n"
            "    accelerator = Accelerator()\n"
            "    if accelerator.is_main_process:\n"
            "        accelerator.wait_for_everyone()\n"
            "    time.sleep(60)\n")
    assert shell.run_cell(code, store_history=True).success  # type: ignore[attr-defined]
    with pytest.raises(LaunchTimeoutError) as caught:
        stuck = shell.user_ns["stuck"]  # type: ignore[attr-defined]
        notebook_launcher(stuck, num_processes=2, dashboard=False, timeout=12)
    message = str(caught.value)
    assert ("rank 0 waited in barrier (accelerator.wait_for_everyone at Cell In[1], line 6); rank 1 was not in a "
            "collective (time.sleep at Cell In[1], line 7)") in message, message


def test_build_machine_paths_leave_the_message_and_other_paths_stay() -> None:
    gloo = "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16025"
    assert without_build_paths(gloo) == "Connection closed by peer [127.0.0.1]:16025"
    reset = "RuntimeError: [/gloo/transport/tcp/pair.cc:537] Read error"
    assert without_build_paths(reset) == "RuntimeError: Read error"
    kept = "index [3] out of range; see [notes.md:4]"
    assert without_build_paths(kept) == kept


def test_a_location_in_a_message_is_short_outside_ipython() -> None:
    assert short_locations('gather (File "/home/me/train.py", line 5)') == "gather (train.py, line 5)"


@pytest.mark.timeout(120)
def test_a_collective_called_on_one_rank_names_the_cells_line(shell: object) -> None:
    code = ("import torch\n"
            "def partial():\n"
            "    from notebook_accel import Accelerator\n"
            "    accelerator = Accelerator()\n"
            "    if accelerator.is_main_process:\n"
            "        accelerator.gather(torch.ones(2))\n")
    assert shell.run_cell(code, store_history=True).success  # type: ignore[attr-defined]
    with pytest.raises(WorkerError) as caught:
        partial = shell.user_ns["partial"]  # type: ignore[attr-defined]
        notebook_launcher(partial, num_processes=2, dashboard=False, timeout=60)
    message = str(caught.value)
    assert message.startswith("rank 0 called gather (Cell In[1], line 6) but rank 1"), message
    assert "your line" not in message and "pair.cc" not in message and "third_party" not in message, message
