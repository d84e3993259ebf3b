"""The fuzzers' leak check sees each kind of leak (a check that cannot fail would prove nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.helpers import process_state


def test_process_state_sees_each_kind_of_leak(tmp_path: object) -> None:
    before = process_state()
    assert before.leaks(process_state()) == []
    read_fd, write_fd = os.pipe()
    os.environ["NOTEBOOK_ACCEL_LEAK_CHECK"] = "1"
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        problems = " | ".join(before.leaks(process_state()))
        for words in ("child processes", "descriptors opened", "NOTEBOOK_ACCEL_LEAK_CHECK", "signal handlers"):
            assert words in problems, problems
    finally:
        child.kill()
        child.wait()
        signal.signal(signal.SIGUSR2, previous)
        del os.environ["NOTEBOOK_ACCEL_LEAK_CHECK"]
        os.close(read_fd)
        os.close(write_fd)
    assert before.leaks(process_state()) == []
