"""Watching a DeepSpeed op's build folder: a build under way is seen however it started (a compiler in the folder,
ninja's log written under the lock, no library yet) and named by who holds the lock; a warm start (the lock taken
for a moment, ninja finding nothing to do) says nothing. Real processes hold the lock and work in the folder."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from notebook_accel.engines.deepspeed import build_watch
from notebook_accel.engines.deepspeed.build_watch import BuildWatch, compilers, holder_name
from tests.engines.deepspeed import jit_workers

NAME, WHAT = "deepspeed_shm_comm", "CPU communication op"


class _Said:
    """What a watch announced: (label, stderr line) pairs."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def __call__(self, text: str, line: str) -> None:
        self.said.append((text, line))


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """A build folder as a finished build leaves it: the library, ninja's files."""
    folder = tmp_path / NAME
    folder.mkdir()
    for name in (f"{NAME}.so", "build.ninja", ".ninja_log", "shm.o"):
        (folder / name).write_text("x")
    return folder


@pytest.fixture
def holder(built: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the folder's lock (released at the end of the test, as a build ends)."""
    process = jit_workers.hold_lock_until_told(built / "lock")
    yield process
    if process.returncode is None:
        jit_workers.release(process)


def test_a_warm_start_says_nothing_then_a_compiler_at_work_is_a_rebuild_named_with_its_holder(
        built: Path, holder: subprocess.Popen[str]) -> None:
    said = _Said()
    watch = BuildWatch(NAME, WHAT, built, 0, {}, said)
    ninja = jit_workers.work_in(built, "ninja")  # every load runs ninja, which finds nothing to do
    try:
        watch.poll()
        watch.poll()
        assert said.said == []
        compiler = jit_workers.work_in(built, "cc1plus")
        try:
            assert compilers(built) == [compiler.pid]
            watch.poll()
        finally:
            jit_workers.end(compiler)
    finally:
        jit_workers.end(ninja)
    (text, line), = said.said
    assert text.startswith(f"another process (pid {holder.pid}, python -c import importlib.util, os, sys")
    assert " is compiling DeepSpeed's CPU communication op (a rebuild, " in text and " so far)" in text
    assert text.endswith("; rank 0 waits for it")
    assert line.startswith(text) and f"{NAME} in {built}" in line and "--build-deepspeed-ops" in line
    watch.poll()  # still under way: the label again (its time so far), no second stderr line
    assert said.said[-1][0].endswith("; rank 0 waits for it") and said.said[-1][1] == ""
    jit_workers.release(holder)
    watch.poll()
    assert said.said[-1][0] == "" and said.said[-1][1].startswith(
        f"another process (pid {holder.pid}, ") and f"finished compiling DeepSpeed's {WHAT} ({NAME}) in " in said.said[-1][1]
    watch.close()
    watch.poll()
    assert len(said.said) == 3  # over: nothing more


def test_ninja_writing_its_log_under_the_lock_is_a_build(built: Path, holder: subprocess.Popen[str]) -> None:
    said = _Said()
    watch = BuildWatch(NAME, WHAT, built, 0, {}, said)
    watch.poll()
    assert said.said == []
    with (built / ".ninja_log").open("a") as log:
        log.write("1\t2\t3\tshm.o\tabc\n")  # a step finished
    watch.poll()
    assert said.said and "is compiling DeepSpeed's CPU communication op (a rebuild, " in said.said[0][0]


def test_a_held_lock_without_the_library_is_a_first_build_by_the_rank_that_holds_it(tmp_path: Path) -> None:
    folder = tmp_path / NAME
    holder = jit_workers.hold_lock_until_told(folder / "lock")
    try:
        said = _Said()
        BuildWatch(NAME, WHAT, folder, 0, {holder.pid: 1}, said).poll()
        mine = _Said()
        BuildWatch(NAME, WHAT, folder, 1, {holder.pid: 1}, mine).poll()
    finally:
        jit_workers.release(holder)
    text = said.said[0][0]
    assert text.startswith("rank 1 is compiling DeepSpeed's CPU communication op (first run only, ")
    assert ", usually 1-6 min); rank 0 waits for it" in text
    assert mine.said[0][0].startswith("rank 1 is compiling") and "waits" not in mine.said[0][0]


def test_a_holder_run_as_the_cli_is_named_by_its_command(built: Path) -> None:
    process = jit_workers.hold_lock_until_told(built / "lock", script=built.parent / "notebook-accel")
    try:
        assert holder_name(process.pid, {}) == f"another process (pid {process.pid}, notebook-accel env " \
                                               "--build-deepspeed-ops)"
        assert holder_name(process.pid, {process.pid: 3}) == "rank 3"
        with pytest.MonkeyPatch.context() as patch:  # seen from a sibling: forked by the same launcher
            patch.setattr(build_watch.os, "getppid", os.getpid)
            assert holder_name(process.pid, {}) == f"another worker of this launcher (pid {process.pid})"
    finally:
        jit_workers.release(process)


def test_a_process_a_worker_started_is_named_by_the_workers_rank() -> None:
    # a worker leads its own session: what it starts (ninja, a compiler, a subprocess that builds) shares it
    code = "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'print(1, flush=True); " \
           "import time; time.sleep(600)'], stdout=subprocess.PIPE); child.stdout.readline(); " \
           "print(child.pid, flush=True); time.sleep(600)"
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        assert holder_name(child, {leader.pid: 2}) == "rank 2"
        assert holder_name(child, {}).startswith(f"another process (pid {child}, python")
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
        leader.stdout.close()  # type: ignore[union-attr]
