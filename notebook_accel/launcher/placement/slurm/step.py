"""The kernel's side of one ``srun`` step: start it with the first run's payload on its stdin (a step kept warm takes
the next run's there too, :meth:`Step.send`), read the tasks' lines (who started where, who ended how) and srun's own
messages from its output, and cancel it (``scancel``)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

from notebook_accel.launcher.placement.slurm.commands import parse_line

__all__ = ["Step", "StepEnded", "task_program"]

_CANCEL_SECONDS = 15.0
_LOST = re.compile(r"Node failure on (\S+)")  # srun's words when Slurm ends a step for a lost node


class StepEnded(RuntimeError):
    """A rank's task ended without saying how its rank ended (the step was cancelled, or its node lost)."""


class Step:
    """A running ``srun``: :attr:`started` (rank -> node, pid), :attr:`codes` (rank -> exit code), :attr:`tail` (srun's
    last lines of its own), :attr:`step_id` (``job.step`` once a task said it)."""

    def __init__(self, command: Sequence[str], payload: bytes) -> None:
        self.command = list(command)
        self.started: dict[int, tuple[str, int]] = {}
        self.codes: dict[int, int] = {}
        self.tail: deque[str] = deque(maxlen=20)
        self.step_id = ""
        self.changed = threading.Condition()
        self.cancelled = False
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        self._readers = [threading.Thread(target=self._read, args=(self.process.stdout, True), daemon=True,
                                          name="notebook-accel-srun-out"),
                         threading.Thread(target=self._read, args=(self.process.stderr, False), daemon=True,
                                          name="notebook-accel-srun-err")]
        for reader in self._readers:
            reader.start()
        self.runs = 0
        self.send(payload)

    def send(self, payload: bytes) -> bool:
        """Start a run: forget the last run's exit codes and srun's messages, and give every task ``payload``.
        ``False``: srun has ended (or its stdin is closed), so no task will read it.

        stdin stays open: the tasks kill their ranks when it ends (the kernel died, or it released the step).
        """
        with self.changed:
            self.codes.clear()
            self.tail.clear()
            self.runs += 1
        stdin = self.process.stdin
        if stdin is None or stdin.closed or self.cancelled:
            return False
        try:
            stdin.write(payload)
            stdin.flush()
        except (OSError, ValueError):
            return False  # srun ended at once: its messages say why
        return not self.ended()

    def idle(self) -> bool:
        """Whether the step can take another run: srun runs, every task said where it runs and how its last run
        ended, with 0."""
        with self.changed:
            done = len(self.codes) == len(self.started) > 0 and all(code == 0 for code in self.codes.values())
        return done and not self.cancelled and not self.ended()

    def fds(self) -> list[int]:
        """The kernel's descriptors of the step (later forks close them)."""
        pipes = (self.process.stdin, self.process.stdout, self.process.stderr)
        return [p.fileno() for p in pipes if p is not None and not p.closed]

    def _read(self, stream: object, tasks: bool) -> None:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            line = raw.decode(errors="replace").rstrip("\n")
            parsed = parse_line(line) if tasks else None
            with self.changed:
                if parsed is None:
                    if line.strip():
                        self.tail.append(line.strip())
                elif parsed[0] == "start" and len(parsed[2]) >= 3:
                    self.started[parsed[1]] = (parsed[2][0], int(parsed[2][1]))
                    self.step_id = parsed[2][2]
                elif parsed[0] == "exit" and parsed[2]:
                    self.codes[parsed[1]] = int(parsed[2][0])
                    if len(parsed[2]) > 1:
                        self.started.setdefault(parsed[1], (parsed[2][1], -1))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def ended(self) -> bool:
        """Whether srun has exited."""
        return self.process.poll() is not None

    def wait_started(self, count: int, deadline: float) -> None:
        """Wait until ``count`` tasks said where they run.

        Raises:
            RuntimeError: srun ended first (with its messages); TimeoutError: the deadline passed.
        """
        with self.changed:
            while len(self.started) < count:
                if self.ended() and not any(r.is_alive() for r in self._readers[:1]):
                    raise RuntimeError(f"srun exited with {self.process.returncode} before every task started "
                                       f"({len(self.started)} of {count} did): {self.messages()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(self.started)} of {count} tasks started ({self.messages()})")
                self.changed.wait(0.1)

    def messages(self) -> str:
        """srun's own last lines, in one line."""
        return " | ".join(self.tail) or "no message from srun"

    def code(self, rank: int) -> int | None:
        """The rank's exit code once its task said it.

        Raises:
            StepEnded: srun ended and the task never said it.
        """
        with self.changed:
            if rank in self.codes:
                return self.codes[rank]
            if self.ended() and not self._readers[0].is_alive():
                lost = _LOST.search(self.messages())
                if lost is not None:
                    raise StepEnded(f"Slurm lost node {lost.group(1)} and cancelled the step (srun: "
                                    f"{self.messages()})")
                raise StepEnded(f"its task ended without its exit code (srun exited with {self.process.returncode}: "
                                f"{self.messages()})")
            return None

    def cancel(self) -> None:
        """``scancel`` the step (its tasks on every node end), then wait for srun (killed if it does not end)."""
        if self.cancelled:
            return
        self.cancelled = True
        if not self.ended() and self.step_id:
            try:
                subprocess.run(["scancel", "--signal=KILL", self.step_id], capture_output=True, timeout=10)
                subprocess.run(["scancel", self.step_id], capture_output=True, timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass
        self.close()

    def close(self) -> None:
        """End the step's stdin (the tasks kill what is left), wait for srun, kill it if it does not end."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(_CANCEL_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for reader in self._readers:
            reader.join(5.0)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def task_program(warm: bool = False) -> list[str]:
    """The command each task runs: this Python with the task module (``warm``: it imports torch and the worker
    runtime before the first run, for every run after it; else each run's child imports what its function needs)."""
    return [sys.executable, "-m", "notebook_accel.launcher.placement.slurm.task", *(["--warm"] if warm else [])]
