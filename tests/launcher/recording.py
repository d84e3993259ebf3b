"""A sink that records everything, for tests."""

from __future__ import annotations

from notebook_accel.events import Event, Log, RunInfo, RunOutcome


class RecordingSink:
    """Keeps the run info, every event and the outcome."""

    def __init__(self) -> None:
        self.info: RunInfo | None = None
        self.events: list[Event] = []
        self.outcome: RunOutcome | None = None

    def start(self, info: RunInfo) -> None:
        self.info = info

    def handle(self, event: Event) -> None:
        self.events.append(event)

    def finish(self, outcome: RunOutcome) -> None:
        self.outcome = outcome

    def lines(self, rank: int, stream: str = "stdout") -> list[str]:
        """Every final output line of ``rank`` on ``stream``, in order (live partial lines left out)."""
        out: list[str] = []
        for e in self.events:
            if isinstance(e, Log) and not e.partial and e.rank == rank and e.stream == stream:
                out.extend(e.text.split("\n"))
        return out

    def of_type(self, kind: type) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]
