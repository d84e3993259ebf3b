"""Benchmark: how live the dashboard is during a 2-process run that loads every core, in a real IPython kernel.

One kernel (started with jupyter_client, so widget values really travel as comm messages) runs the same launch
three times per repeat, alternating: with a sink that does nothing (the baseline for kernel CPU), with today's
``Dashboard`` (inline SVG curves, ticked by the launcher), and with the previous curve path (matplotlib Agg PNG
in an ``Image`` widget, redrawn at most every 1 s and at most 2.5% of the time, no tick), measured in the same run.
The workers spin on matmuls on every core and log ~1,000 metrics/s (2 metrics x 500 steps/s, paced).

Printed per variant: curve updates per second, plotted-vs-logged lag (for every logged step, the time from
its logging to the first curve update that plots it; median and max), kernel CPU per curve update, and the kernel CPU of the
whole run over the null sink, in % of one core (target: <= 5%).

Run: ``python benchmarks/dashboard_live.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kernel.live_run import run_cell, stdout_of  # noqa: E402

CELL = textwrap.dedent(
    """
    import json, os, statistics, time
    import ipywidgets as w
    import torch
    from notebook_accel import notebook_launcher
    from notebook_accel.tracking import TrackerHub
    from notebook_accel.widgets.dashboard import Dashboard

    def train(seconds):
        rank = int(os.environ["RANK"])
        hub = TrackerHub(log_with=None, logging_dir=None, is_main_process=rank == 0, rank=rank)
        a = torch.randn(128, 128)
        times, step, start = [], 0, time.time()
        while time.time() - start < seconds:
            now = time.time()
            hub.log({"train/loss": 1.0 / (step + 1), "lr": 0.1}, step, {})
            times.append(now)
            step += 1
            while time.time() < start + step * 0.002:  # paced: 500 steps/s x 2 metrics = 1,000 metrics/s
                a = torch.tanh(a @ a)
        hub.finish()
        return times

    class Recorder:
        def _record(self, cost):
            steps = [s.last[0] for s in self.state.series.values() if s.last is not None]
            self.records.append((time.time(), max(steps) if steps else -1, cost))

    class Live(Recorder, Dashboard):
        def _redraw(self, now):
            t = time.thread_time(); super()._redraw(now); self._record(time.thread_time() - t)

    class Agg(Recorder, Dashboard):
        def __init__(self, **kw):
            super().__init__(plot_interval=1.0, plot_share=0.025, **kw)
            from notebook_accel.widgets.plots import CurvePlot
            self.plot = CurvePlot()  # the dashboard makes its own only at the end
            self.picture = w.Image(format="png")
        def _build_widgets(self):
            view = super()._build_widgets()
            kids = list(view.root.children); kids[kids.index(view.body)] = self.picture; view.root.children = kids
            return view
        def _redraw(self, now):
            t, started = time.thread_time(), time.perf_counter()
            self.picture.value = self.plot.render(self.state.series); self.curves.redraws += 1
            self.curves._next = now + max(1.0, (time.perf_counter() - started) / 0.025)  # its schedule, as it was
            self._record(time.thread_time() - t)
        def tick(self, now):
            pass  # the previous dashboard had no periodic wake-up

    class Null:
        def start(self, info): pass
        def handle(self, event): pass
        def finish(self, outcome): pass

    def one(kind, seconds):
        sink = {"null": Null, "live": Live, "agg": Agg}[kind]() if kind == "null" else {"live": Live, "agg": Agg}[kind](display=lambda obj: w.Output(), live_after=0.0)
        if kind != "null":
            sink.records = []
        c0, w0 = time.process_time(), time.time()
        times = notebook_launcher(train, args=(seconds,), num_processes=2, dashboard=sink)
        cpu, wall = time.process_time() - c0, time.time() - w0
        recs = [r for r in getattr(sink, "records", []) if r[0] <= times[-1]]
        lags, i = [], 0  # for each logged step: how long until an update plotted it
        for at, step, _ in recs:
            while i < len(times) and i <= step:
                lags.append(max(at - times[i], 0.0)); i += 1
        span = times[-1] - times[0]
        return {"cpu": cpu, "wall": wall, "updates": len(recs) / span, "steps": len(times),
                "lag_med": statistics.median(lags) if lags else None, "lag_max": max(lags) if lags else None,
                "cost": statistics.median([r[2] for r in recs]) if recs else None}

    out = {"null": [], "live": [], "agg": []}
    for _ in range(REPEATS):
        for kind in out:
            out[kind].append(one(kind, SECONDS))
    print("RESULT" + json.dumps(out))
    """
)


def _median(runs: list[dict[str, float]], key: str) -> float:
    values = sorted(r[key] for r in runs if r[key] is not None)
    return values[len(values) // 2] if values else float("nan")


def main() -> None:
    """Run the three variants in one kernel and print their figures and the ratios against the Agg path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat of 4 s instead of three of 8 s")
    args = parser.parse_args()
    repeats, seconds = (1, 4.0) if args.quick else (3, 8.0)
    code = CELL.replace("REPEATS", str(repeats)).replace("SECONDS", str(seconds))
    messages = run_cell(code, timeout=120 + repeats * seconds * 6)
    errors = [m.content for m in messages if m.msg_type == "error"]
    if errors:
        raise SystemExit(f"the benchmark cell failed: {errors[0].get('ename')}: {errors[0].get('evalue')}")
    out = json.loads(stdout_of(messages).split("RESULT", 1)[1].splitlines()[0])
    steps = _median(out["null"], "steps")
    print(f"[live] 2 workers spinning on every core, ~{2 * steps / seconds:.0f} metrics/s, {seconds:.0f} s x {repeats}")
    base = _median(out["null"], "cpu") / _median(out["null"], "wall")
    figures = {}
    for kind, name in (("agg", "previous: Agg PNG"), ("live", "now: inline SVG")):
        runs = out[kind]
        share = _median(runs, "cpu") / _median(runs, "wall") - base
        figures[kind] = (_median(runs, "updates"), _median(runs, "lag_med"), _median(runs, "lag_max"),
                         _median(runs, "cost"), share)
        ups, lag, lag_max, cost, share = figures[kind]
        print(f"[live] {name:18s} {ups:5.2f} curve updates/s  lag median {lag:5.2f} s max {lag_max:5.2f} s  "
              f"{cost * 1e3:7.2f} ms kernel CPU/update  dashboard {share * 100:+5.2f}% of a core over the null sink")
    (a_ups, a_lag, _, a_cost, _), (l_ups, l_lag, _, l_cost, l_share) = figures["agg"], figures["live"]
    print(f"[live] ratios now/previous: updates/s x{l_ups / a_ups:.1f}, median lag x{l_lag / a_lag if a_lag else float('nan'):.2f}, "
          f"CPU per update x{l_cost / a_cost:.3f}")
    print(f"[live] targets: >= 1 update/s {'ok' if l_ups >= 1 else 'MISSED'}, lag <= 1 s {'ok' if l_lag <= 1 else 'MISSED'}, "
          f"<= 5% of a core {'ok' if l_share <= 0.05 else 'MISSED'}")


if __name__ == "__main__":
    main()
