"""What the shared watch (:class:`~notebook_accel.launcher.placement.remote.watch.RunWatch`) asks of a Slurm run,
answered by its step: a rank's result is the exit code its task printed (``ref``: the rank), a stream that closed with
no result means the rank's process or that node's ``slurmd`` was killed, and Slurm's node table says whether a silent
node is down."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle
from notebook_accel.launcher.placement.slurm.step import Step, StepEnded

__all__ = ["SlurmResults"]

_STATE = re.compile(r"\bState=(\S+)")


class SlurmResults:
    """The step's answers about its ranks (a :class:`~notebook_accel.launcher.placement.remote.watch.RankResults`)."""

    def __init__(self, step: Step) -> None:
        self.step = step

    def ready(self, refs: list[Any]) -> list[Any]:
        """The ranks whose task printed their exit code, or that can no longer (srun ended)."""
        return [rank for rank in refs if self._ready(int(rank))]

    def _ready(self, rank: int) -> bool:
        try:
            return self.step.code(rank) is not None
        except StepEnded:
            return True

    def result(self, ref: Any) -> int:
        """The rank's exit code.

        Raises:
            StepEnded: its task ended without saying it (the step cancelled, its node lost).
        """
        code = self.step.code(int(ref))
        if code is None:
            raise StepEnded("its task has not ended")
        return code

    def death(self, handle: RemoteWorkerHandle, error: BaseException) -> str | None:
        """``None``: the step's own words (:class:`StepEnded`) say why, as a rank that could not run."""
        return None

    def stream_closed(self, handle: RemoteWorkerHandle) -> str:
        """Slurm's words for a stream that closed with no result."""
        return "it was killed, or Slurm's slurmd on that node stopped"

    def node_state(self, handle: RemoteWorkerHandle) -> str:
        """``"; Slurm marks the node DOWN"`` (or its other unhealthy state) when ``scontrol`` says so."""
        try:
            shown = subprocess.run(["scontrol", "show", "node", "-o", handle.node_id], capture_output=True, text=True,
                                   timeout=5).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
        state = _STATE.search(shown)
        if state is not None and any(word in state.group(1) for word in ("DOWN", "NOT_RESPONDING", "FAIL")):
            return f"; Slurm marks the node {state.group(1)}"
        return ""
