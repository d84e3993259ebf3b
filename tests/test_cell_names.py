"""Worker tracebacks name notebook cells as IPython does (``Cell In[1]``), not IPython's temporary files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from notebook_accel.cell_names import cell_names, rename_cells
from notebook_accel.launcher import WorkerError, notebook_launcher


def test_known_files_are_renamed_and_others_kept() -> None:
    text = ('  File "/tmp/ipykernel_7/3049281213.py", line 5, in train\n'
            '  File "/usr/lib/python3/x.py", line 9, in helper\n')
    renamed = rename_cells(text, lambda f: ("Cell", "In[6]") if "ipykernel_7" in f else None)
    assert renamed == '  Cell In[6], line 5, in train\n  File "/usr/lib/python3/x.py", line 9, in helper\n'


def test_outside_ipython_nothing_changes() -> None:
    text = '  File "/tmp/ipykernel_7/1.py", line 5, in train'
    assert cell_names(text) == text


@pytest.fixture
def shell() -> Iterator[object]:
    """A real IPython shell in this process (as in a kernel), removed afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    instance = InteractiveShell.instance()
    try:
        yield instance
    finally:
        InteractiveShell.clear_instance()


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
