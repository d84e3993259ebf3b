"""Errors a launch can end with once workers were started (refusals before any fork are ``LaunchError``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from notebook_accel.errors import NotebookAccelError
from notebook_accel.peer_loss import is_peer_loss

__all__ = ["WorkerFailure", "WorkerError", "LaunchTimeoutError", "death_message", "grouped_summaries",
           "partial_collective"]

_SHORT = 160  # characters of a consequence's message kept in the summary


@dataclass(frozen=True)
class WorkerFailure:
    """What one failing worker reported (or what the launcher saw of it).

    Attributes:
        rank: global rank of the worker.
        exit_code: the process's exit code (negative: killed by a signal), ``None`` if it was not reaped.
        signal_name: e.g. ``"SIGKILL"`` when a signal ended it, else ``None``.
        exc_type: the exception's type name (``"ValueError"``), empty when it died without one.
        message: the exception's message, or a description of how the process ended.
        traceback: the user's frames as text (empty when it died without an exception).
        call: the library call the user's code was in (``"gather (Cell In[8], line 12)"``), else empty.
    """

    rank: int
    exit_code: int | None
    signal_name: str | None
    exc_type: str
    message: str
    traceback: str
    call: str = ""

    @property
    def lost_peer(self) -> bool:
        """True when this rank only failed because a peer vanished (the backend's connection-lost error)."""
        return is_peer_loss(self.exc_type, self.message)

    def summary(self, ranks: tuple[int, ...] = (), short: bool = False) -> str:
        """One line: ``rank 1: ValueError: boom``, ``rank 1: killed by SIGKILL``; a lost peer is shortened.

        ``ranks``: the ranks that failed the same way (default: this one), named together; ``short``: a long
        message is cut (a headline, where the full error follows).
        """
        message = self.message
        if (self.lost_peer or short) and len(message) > _SHORT:
            message = message[:_SHORT].rstrip() + "..."
        who = _ranks(ranks or (self.rank,))
        if self.exc_type:
            return f"{who}: {self.exc_type}: {message}".rstrip(": ")
        return f"{who}: {message}"

    def traceback_below_message(self) -> str:
        """The traceback, its last line shortened when it only repeats a long message shown above it."""
        text = self.traceback.rstrip()
        ending = f"{self.exc_type}: {self.message}".rstrip()
        if self.exc_type and len(self.message) > _SHORT and text.endswith(ending):
            last = text[: len(text) - len(ending)].rsplit("\n", 1)
            if len(last) == 2 and (not last[1] or last[1].endswith(".")):  # the type's module path, if any
                return f"{last[0]}\n{last[1]}{self.exc_type} (its message is above)"
        return text


def grouped_summaries(failures: tuple[WorkerFailure, ...] | list[WorkerFailure], short: bool = False) -> list[str]:
    """One summary per distinct error (type and message), naming every rank that had it, in order of appearance."""
    groups: dict[tuple[str, str], list[WorkerFailure]] = {}
    for failure in failures:
        groups.setdefault((failure.exc_type, failure.message), []).append(failure)
    return [same[0].summary(tuple(f.rank for f in same), short) for same in groups.values()]


def _ordered(failures: tuple[WorkerFailure, ...]) -> tuple[WorkerFailure, ...]:
    """Real failures first (in arrival order), then the ranks that only lost their connection to them."""
    real = tuple(f for f in failures if not f.lost_peer)
    return real + tuple(f for f in failures if f.lost_peer) if real else failures


def _lost_node(failures: tuple[WorkerFailure, ...], elsewhere: tuple[int, ...]) -> str:
    """The head of the message when every local failure is a lost connection and other machines take part."""
    peers = sorted({m for f in failures for m in re.findall(r"peer \[([^\]]+)\]", f.message)})
    where = f" at {', '.join(peers)}" if peers else ""
    ranks = ", ".join(str(f.rank) for f in failures)
    return (
        f"the run lost another node: every failing rank here (ranks {ranks}) lost its connection to a peer{where}, "
        f"and ranks {list(elsewhere)} run on other machines; the cause is in that node's output (its process or its "
        "machine died, or the network between the nodes broke):\n" + "\n".join(f"  {f.summary()}" for f in failures)
    )


def _ranks(ranks: tuple[int, ...]) -> str:
    """``rank 1`` or ``ranks 1, 3``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def partial_collective(failures: tuple[WorkerFailure, ...], returned: tuple[int, ...]) -> str:
    """The head of the message when ranks lost their peers in a collective because those peers had already returned
    from the function (a collective under ``if accelerator.is_main_process:``); ``""`` when that is not the case."""
    if not returned or not all(f.lost_peer for f in failures):
        return ""
    lines = [
        f"rank {f.rank} called {f.call or 'a collective'} but {_ranks(returned)} had already returned from the training "
        "function: a collective must be called on every rank" for f in failures
    ]
    lines.append("(a gather, reduce or wait_for_everyone under `if accelerator.is_main_process:` is the usual cause: "
                 "call it on every rank and use the result on one)")
    lines += [f"  {f.summary()}" for f in failures]
    return "\n".join(lines)


def _format(failures: tuple[WorkerFailure, ...], elsewhere: tuple[int, ...] = (), returned: tuple[int, ...] = ()) -> str:
    """The exception text: each real failure on a line, then the consequences, then the first one's traceback."""
    first = failures[0]
    real = [f for f in failures if not f.lost_peer] or list(failures)
    after = [f for f in failures if f not in real]
    partial = partial_collective(failures, returned)
    if partial:
        head = partial
        after = []
    elif elsewhere and all(f.lost_peer for f in failures):
        head = _lost_node(failures, elsewhere)
    elif len(real) == 1:
        head = f"worker {first.summary()}"
    else:
        ranks = ", ".join(str(f.rank) for f in real)
        head = f"{len(real)} workers failed (ranks {ranks}):\n" + "\n".join(f"  {g}" for g in grouped_summaries(real))
    if after:
        ranks = ", ".join(str(f.rank) for f in after)
        head += (f"\nthen rank{'s' if len(after) > 1 else ''} {ranks} lost the connection to the failed worker "
                 "(a consequence, not a second bug):\n" + "\n".join(f"  {f.summary()}" for f in after))
    if first.traceback:
        head += f"\n\nrank {first.rank}, your code only:\n{first.traceback_below_message()}"
    return head


class WorkerError(NotebookAccelError, RuntimeError):
    """One or more launched workers failed; the other workers were stopped and reaped.

    The message names each failing rank with its exception (or exit code / signal) and shows the first
    failing rank's traceback, limited to your own frames.

    Attributes:
        failures: every failing worker (:class:`WorkerFailure`): real failures first in the order they happened,
            then the ranks that failed only because they lost the connection to a failed one.
        rank, exit_code, traceback: those of the first failure.
        elsewhere: the ranks that run on other machines (a run of several nodes), else empty.
        returned: the ranks whose function had returned normally (a rank that lost them in a collective is told so).
        last_checkpoint: the last checkpoint the run committed with ``save_state`` before failing, else ``None``.
        attempts: after restarts (``max_restarts``), one line per attempt with its cause, the first first.

    Example:
        >>> try:
        ...     notebook_launcher(train, num_processes=2)   # doctest: +SKIP
        ... except WorkerError as e:
        ...     print(e.rank, e.failures[0].exc_type)
    """

    def __init__(
        self, failures: list[WorkerFailure] | tuple[WorkerFailure, ...], elsewhere: tuple[int, ...] = (),
        returned: tuple[int, ...] = (), attempts: tuple[str, ...] = (),
    ) -> None:
        if not failures:
            raise ValueError("WorkerError needs at least one failure")
        self.failures: tuple[WorkerFailure, ...] = _ordered(tuple(failures))
        self.elsewhere: tuple[int, ...] = tuple(elsewhere)
        self.returned: tuple[int, ...] = tuple(sorted(returned))
        first = self.failures[0]
        self.rank: int = first.rank
        self.exit_code: int | None = first.exit_code
        self.traceback: str = first.traceback
        self.last_checkpoint: str | None = None
        self.attempts: tuple[str, ...] = tuple(attempts)
        text = _format(self.failures, self.elsewhere, self.returned)
        if len(self.attempts) > 1:  # a run that restarted: every attempt's cause, the last one's in full above
            text += f"\n\nevery attempt ({len(self.attempts)}):\n" + "\n".join(f"  {a}" for a in self.attempts)
        super().__init__(text)

    def with_attempts(self, attempts: tuple[str, ...]) -> WorkerError:
        """This error, listing ``attempts`` (one line each: the run restarted ``len(attempts) - 1`` times)."""
        error = type(self)(self.failures, self.elsewhere, self.returned, attempts)
        error.last_checkpoint = self.last_checkpoint
        return error

    def __reduce__(self) -> tuple[type[WorkerError], tuple[Any, ...]]:
        """Pickle by failures (the default would pass the message to ``__init__``)."""
        return (type(self), (self.failures, self.elsewhere, self.returned, self.attempts))


class LaunchTimeoutError(NotebookAccelError, TimeoutError):
    """The run took longer than ``timeout=`` seconds; every worker was stopped and reaped.

    Raise ``timeout`` or find what hangs (a collective that one rank never reaches is the usual cause).
    """


def death_message(exit_code: int, name: str | None, oom_before: int | None = None,
                  oom_now: int | None = None, memory_note: str | None = None) -> str:
    """How a worker that sent no exception ended, for the error message. The out-of-memory killer is named
    only on evidence, and never against it: where the system's count of its kills is known (``oom_before`` at
    the start, ``oom_now``; it counts kills inside memory cgroups too) and did not rise, it killed nothing, however
    full memory was; otherwise a sample that showed the worker's memory running out (``memory_note``, see
    :func:`notebook_accel.monitor.memory_death_note`) names it with its figures, or the count's rise alone."""
    end = f"killed by {name} (exit code {exit_code}) before the function returned"
    if name == "SIGKILL":
        rise = oom_now - oom_before if oom_before is not None and oom_now is not None else None
        if rise is not None and rise <= 0:
            return (f"{end} (not by the out-of-memory killer, which killed nothing during the run: another process "
                    "sent it)")
        if memory_note:
            return f"{end}: {memory_note}"
        if rise is not None:
            return (f"{end} (the system's out-of-memory killer killed a process during the run: check memory use, "
                    "e.g. with dmesg)")
    if name is not None:
        return end
    return (
        f"exited with code {exit_code} before the function returned, without an exception "
        "(os._exit(), a crash in C code, or a failure in the worker's set-up: see its output above)"
    )
