"""Flushing without waiting on the kernel's IO thread, and forks that leave the kernel's buffered text alone."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.launcher import notebook_launcher
from notebook_accel.display.flush import flush_soon


class _PubThread:
    """ipykernel's IOPub thread, as far as flush_soon uses it: ``thread`` and ``schedule``."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.scheduled: list[Any] = []

    def schedule(self, callback: Any) -> None:
        self.scheduled.append(callback)


class _KernelStream(io.StringIO):
    """An ipykernel OutStream stand-in: ``flush()`` would wait on the IO thread; ``_flush`` is what it runs."""

    def __init__(self, thread: threading.Thread) -> None:
        super().__init__()
        self.pub_thread = _PubThread(thread)
        self.waited = 0

    def flush(self) -> None:
        self.waited += 1

    def _flush(self) -> None:
        pass


@pytest.fixture
def io_thread() -> Any:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


def test_a_kernel_stream_is_handed_to_its_io_thread_without_waiting(io_thread: threading.Thread) -> None:
    stream = _KernelStream(io_thread)
    flush_soon(stream)
    assert stream.pub_thread.scheduled == [stream._flush] and stream.waited == 0


def test_other_streams_and_the_io_thread_itself_flush_the_ordinary_way(io_thread: threading.Thread) -> None:
    plain = io.StringIO()
    flush_soon(plain)  # nothing to schedule on: flushed
    stream = _KernelStream(threading.current_thread())  # called on the IO thread: scheduling would wait on itself
    flush_soon(stream)
    assert stream.waited == 1 and stream.pub_thread.scheduled == []
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    gone = _KernelStream(dead)  # a forked child's copy: the thread is not running
    flush_soon(gone)
    assert gone.waited == 1 and gone.pub_thread.scheduled == []


def _say(word: str) -> str:
    print(word)
    return word


def test_text_buffered_in_the_kernel_at_the_fork_is_written_once(tmp_path: Path, io_thread: threading.Thread) -> None:
    """The workers are forked without waiting for the kernel's streams to be sent (a kernel stream is only handed
    to its IO thread): what is still buffered in the kernel at the fork must never be written by a worker too."""
    path = tmp_path / "out.txt"
    saved = sys.stdout
    with open(path, "w", buffering=1 << 16, encoding="utf-8") as out:
        pub = _PubThread(io_thread)  # holds the flushes until the end, as a busy IO thread would
        out.pub_thread, out._flush = pub, out.flush  # type: ignore[attr-defined]
        sys.stdout = out
        try:
            out.write("kernel text, not yet sent;")
            assert notebook_launcher(_say, args=("from a worker",), num_processes=2, dashboard=False) == "from a worker"
            assert pub.scheduled, "nothing was handed to the IO thread"
            assert path.read_text(encoding="utf-8").count("kernel text") == 0  # still buffered after the forks
        finally:
            sys.stdout = saved
            for callback in pub.scheduled:
                callback()
    text = path.read_text(encoding="utf-8")
    assert text.count("kernel text, not yet sent;") == 1, text
    assert text.count("from a worker") == 1 and text.count("Launching 2 processes") == 1, text
