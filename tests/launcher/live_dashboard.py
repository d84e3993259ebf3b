"""For the tests that run a cluster launch from a real Jupyter kernel (Ray's, Slurm's): a dashboard that notes when
it heard each event, and the report of what it heard live (the ranks run
``tests.distributed.workers.both_ranks_report``). Imported inside the kernel, as it needs ipywidgets.
"""

from __future__ import annotations

import time
from typing import Any

from notebook_accel.events import RunInfo, RunOutcome
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.widgets.dashboard import Dashboard

LIVE_MARGIN = 2.0  # an event heard this long before the run's end was heard live, not at the end


class Timed(Dashboard):
    """The dashboard, noting (time, event type, rank, ranks of a sample) for every event it hears."""

    def start(self, info: RunInfo) -> None:
        self.heard: list[tuple[float, str, int | None, list[int]]] = []
        super().start(info)

    def handle(self, event: Any) -> None:
        ranks = [r.rank for r in getattr(event, "ranks", ())]
        self.heard.append((time.monotonic(), type(event).__name__, getattr(event, "rank", None), ranks))
        super().handle(event)

    def handle_metrics(self, batch: MetricsBatch) -> None:
        self.heard.append((time.monotonic(), "MetricsBatch", batch.rank, []))
        super().handle_metrics(batch)

    def finish(self, outcome: RunOutcome) -> None:
        self.ended = time.monotonic()
        super().finish(outcome)


def report(dash: Timed, value: Any) -> dict[str, Any]:
    """What ranks 0 and 1 sent while the run went on (at least :data:`LIVE_MARGIN` before its end), and the
    dashboard's state at the end."""
    early = dash.ended - LIVE_MARGIN

    def live(kind: str, rank: int) -> bool:
        return any(t < early and k == kind and (r == rank or rank in rs) for t, k, r, rs in dash.heard)

    state = dash.state
    return {
        "value": value,
        "output_live": [live("Log", r) for r in (0, 1)],
        "samples_live": [live("SystemSample", r) for r in (0, 1)],
        "progress_live": [live("Progress", r) for r in (0, 1)],
        "metrics_live": live("MetricsBatch", 0) or live("Metrics", 0),
        "system_ranks": sorted(state.system.ranks) if state.system else [],
        "series": sorted(state.series),
        "status": state.shown_status,
        "nodes": [state.ranks[r].node for r in (0, 1)],
        "spans_machines": state.spans_machines,
    }
