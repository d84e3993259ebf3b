"""What real workers write reaches the sink as a terminal shows it, in order, live, and whole in the log files."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
import traceback
from pathlib import Path

import pytest

from notebook_accel.events import Finished, Log
from notebook_accel.launcher import WorkerError, notebook_launcher
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


def _rank() -> int:
    return int(os.environ["RANK"])


# -- worker bodies (module level, plain asserts) ------------------------------------------------------------
def interleaved() -> None:
    """Numbered lines alternating between stdout and stderr, through every way a worker writes."""
    libc = ctypes.CDLL(None)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, force=True)
    for i in range(1, 41):
        way = i % 5
        if way == 0:
            print(i)
        elif way == 1:
            print(i, file=sys.stderr)
        elif way == 2:
            sys.stderr.write(f"{i}\n")
        elif way == 3:
            logging.getLogger("t").warning(str(i))
        else:
            sys.stdout.flush()
            libc.printf(f"{i}\n".encode())
            libc.fflush(None)


def progress_bar_then_wait() -> None:
    from tqdm import tqdm

    for _ in tqdm(range(8), mininterval=0.05, ascii=True):
        time.sleep(0.1)
    print("loading", end="", flush=True)
    time.sleep(0.8)
    print(" done")


def chatty(lines: int) -> None:
    for i in range(lines):
        print(f"rank {_rank()} line {i}")
    print(f"rank {_rank()} \x1b[31mwarned\x1b[0m", file=sys.stderr)


def notebook_bars() -> str:
    import tqdm.auto
    import tqdm.notebook

    for _ in tqdm.notebook.tqdm(range(3), ascii=True, display=False):
        pass
    for _ in tqdm.auto.tqdm(range(2), ascii=True):
        pass
    return type(tqdm.auto.tqdm).__name__


def fails_on_rank_1() -> None:
    if _rank() == 1:
        raise ValueError("rank one is broken")
    time.sleep(30)


# -- tests ------------------------------------------------------------------------------------------------
def _output(sink: RecordingSink, rank: int) -> list[str]:
    """The final lines of ``rank`` across both streams, in arrival order."""
    return [line for e in sink.events if isinstance(e, Log) and e.rank == rank and not e.partial
            for line in e.text.split("\n")]


def test_stdout_and_stderr_arrive_in_the_order_written() -> None:
    sink = RecordingSink()
    notebook_launcher(interleaved, num_processes=2, dashboard=sink)
    for rank in (0, 1):
        numbers = [line.split()[-1] for line in _output(sink, rank) if line.split() and line.split()[-1].isdigit()]
        assert numbers == [str(i) for i in range(1, 41)]
        stderr = [int(n) for n in " ".join(sink.lines(rank, "stderr")).split() if n.isdigit()]
        assert stderr == [i for i in range(1, 41) if i % 5 in (1, 2, 3)]


def test_a_progress_bar_and_a_partial_line_show_while_the_worker_runs() -> None:
    sink = RecordingSink()
    notebook_launcher(progress_bar_then_wait, num_processes=2, dashboard=sink)
    finished = next(i for i, e in enumerate(sink.events) if isinstance(e, Finished) and e.rank == 0)
    before_end = [e for e in sink.events[:finished] if isinstance(e, Log) and e.rank == 0 and e.partial]
    bars = [e.text for e in before_end if e.stream == "stderr" and "|" in e.text]
    assert len(bars) >= 2 and len(set(bars)) == len(bars)  # several different states, while it ran
    assert all("\r" not in bar and "\n" not in bar for bar in bars)
    assert any(e.stream == "stdout" and e.text == "loading" for e in before_end)
    assert sink.lines(0) == ["loading done"]
    final_bar = sink.lines(0, "stderr")
    assert len(final_bar) == 1 and "8/8" in final_bar[0]


def test_the_log_files_keep_every_ranks_whole_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "logs"))
    sink = RecordingSink()
    notebook_launcher(chatty, args=(3000,), num_processes=2, dashboard=sink)
    assert sink.info is not None and sink.info.log_dir
    folder = Path(sink.info.log_dir)
    assert folder.parent.resolve() == (tmp_path / "logs").resolve() and folder.name.endswith("-chatty")
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.log", "rank1.log"]
    for rank in (0, 1):
        lines = (folder / f"rank{rank}.log").read_text().splitlines()
        assert lines == [f"rank {rank} line {i}" for i in range(3000)] + [f"rank {rank} warned"]


def test_log_files_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", "off")
    sink = RecordingSink()
    notebook_launcher(chatty, args=(1,), num_processes=2, dashboard=sink)
    assert sink.info is not None and sink.info.log_dir == ""
    assert sink.lines(1) == ["rank 1 line 0"]


def test_notebook_tqdm_in_a_worker_is_the_console_bar() -> None:
    pytest.importorskip("tqdm")
    pytest.importorskip("ipywidgets")
    import tqdm.notebook  # imported in the launching process, as a notebook's first cell would

    sink = RecordingSink()
    notebook_launcher(notebook_bars, num_processes=2, dashboard=sink)
    bars = sink.lines(0, "stderr")
    assert any("3/3" in line for line in bars) and any("2/2" in line for line in bars), bars
    assert not any("HBox" in line or "IProgress" in line for line in sink.lines(0)), sink.lines(0)
    assert tqdm.notebook.tqdm.__init__ is not tqdm.std.tqdm.__init__


def test_worker_error_carries_no_launcher_frames() -> None:
    with pytest.raises(WorkerError) as info:
        notebook_launcher(fails_on_rank_1, num_processes=2, dashboard=RecordingSink())
    files = [Path(f.filename).name for f in traceback.extract_tb(info.value.__traceback__)]
    assert files == ["test_output_launch.py", "tracebacks.py"], files  # the call, and the hidden re-raise
    assert "ValueError: rank one is broken" in str(info.value)
