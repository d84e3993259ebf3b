"""Benchmark: the cost of logging and of the live dashboard.

1. ``log`` per call: ``LiveTracker.log`` and ``TrackerHub.log`` (what ``accelerator.log`` calls) with a real
   channel (an EventWriter over a pipe drained by another process), against an empty loop; also as a share of
   a 1 ms training step (target: at most 1%).
2. Curve redraw time with 10^3 vs 10^6 logged points (downsampled: must be about the same).
3. Kernel CPU time (``time.process_time``) while 2 forked writers stream 1,000 metric events/s into the
   dashboard's ``handle`` (target: at most 5% of one core), against a sink that does nothing.

Run: ``python benchmarks/logging_cost.py [--quick]``. Prints ratios against baselines measured in the same run,
alternating the variants.
"""

from __future__ import annotations

import os


import argparse
import multiprocessing as mp
import statistics
import time
from multiprocessing.connection import Connection, wait

from notebook_accel import channel
from notebook_accel.events import Event, Metrics, RunInfo, RunOutcome, Started
from notebook_accel.tracking import LiveTracker, TrackerHub
from notebook_accel.widgets.dashboard import Dashboard
from notebook_accel.widgets.plots import CurvePlot
from notebook_accel.widgets.run_model import RunState

INFO = RunInfo(2, ("cpu", "cpu"), "gloo", "bench")


def _drain(reader: Connection, write_end: Connection) -> None:
    """Reader process: receive and drop messages until the writer closes."""
    write_end.close()  # the inherited copy would keep the pipe open forever
    try:
        while True:
            reader.recv()
    except EOFError:
        pass


def bench_log_call(calls: int, repeats: int, batch: int = 100) -> None:
    """Per-call cost of LiveTracker.log and TrackerHub.log with a real channel, vs an empty loop.

    The whole cost is counted in the caller's thread: the flusher thread is parked (a long interval) and the
    loop flushes itself every ``batch`` calls, which is what the flusher does every 0.1 s for a loop running
    1,000 steps per second (pickling and writing the batch included).
    """
    ctx = mp.get_context("fork")
    reader, conn = ctx.Pipe(duplex=False)
    drainer = ctx.Process(target=_drain, args=(reader, conn), daemon=True)
    drainer.start()
    reader.close()
    writer = channel.EventWriter(conn, flush_interval=3600.0)
    channel.install(writer)
    tracker = LiveTracker(rank=0)
    hub = TrackerHub(log_with=None, logging_dir=None, is_main_process=True, rank=0)
    no_kwargs: dict = {}
    flush = writer.flush

    def empty() -> float:
        t = time.perf_counter()
        for step in range(calls):
            if step % batch == 0:
                flush()
        return time.perf_counter() - t

    def live() -> float:
        t = time.perf_counter()
        for step in range(calls):
            tracker.log({"train/loss": 0.5, "lr": 1e-3}, step)
            if step % batch == 0:
                flush()
        flush()
        return time.perf_counter() - t

    def via_hub() -> float:
        t = time.perf_counter()
        for step in range(calls):
            hub.log({"train/loss": 0.5, "lr": 1e-3}, step, no_kwargs)
            if step % batch == 0:
                flush()
        flush()
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"empty loop": [], "LiveTracker.log": [], "TrackerHub.log": []}
    for _ in range(repeats):
        for name, fn in (("empty loop", empty), ("LiveTracker.log", live), ("TrackerHub.log", via_hub)):
            times[name].append(fn() / calls)
    channel.uninstall()
    writer.close()
    drainer.join(30)
    base = statistics.median(times["empty loop"])
    print(
        f"[log] {calls} calls x {repeats} repeats, 2 values per call, real channel (pipe drained by a process), "
        f"sent in batches of {batch} (cost of pickling and writing included)"
    )
    for name, values in times.items():
        per_call = statistics.median(values)
        extra = per_call - base
        print(
            f"[log] {name:16s} median {per_call * 1e6:6.2f} us/call, best {min(values) * 1e6:6.2f}  "
            f"(+{extra * 1e6:5.2f} us over the empty loop = {extra / 1e-3 * 100:4.2f}% of a 1 ms step)"
        )


def _filled_state(points: int) -> RunState:
    """A run with ``points`` steps of train/loss and one eval/loss every 10 steps."""
    state = RunState(INFO)
    for step in range(points):
        values = {"train/loss": 1.0 / (step + 1) + (step % 7) * 1e-3}
        if step % 10 == 0:
            values["eval/loss"] = 1.2 / (step + 1)
        state.apply(Metrics(0, step, values, 0.0))
    return state


def bench_redraw(repeats: int) -> None:
    """Render time of the curves with 10^3 vs 10^6 logged points."""
    t = time.perf_counter()
    states = {n: _filled_state(n) for n in (10**3, 10**6)}
    fill = time.perf_counter() - t
    plots = {n: CurvePlot() for n in states}
    for n, plot in plots.items():
        plot.render(states[n].series)  # build the figure once, as the dashboard does
    times: dict[int, list[float]] = {n: [] for n in states}
    for _ in range(repeats):
        for n, plot in plots.items():
            t = time.perf_counter()
            plot.render(states[n].series)
            times[n].append(time.perf_counter() - t)
    small, large = (statistics.median(times[n]) for n in (10**3, 10**6))
    drawn = {n: sum(len(s.points()[0]) for s in states[n].series.values()) for n in states}
    print(f"[redraw] filling the run models took {fill:.2f} s ({(10**3 + 10**6) * 1.1:.0f} values)")
    print(f"[redraw] 10^3 points: {small * 1e3:6.1f} ms/redraw ({drawn[10**3]} points drawn)")
    print(f"[redraw] 10^6 points: {large * 1e3:6.1f} ms/redraw ({drawn[10**6]} points drawn)")
    print(f"[redraw] ratio 10^6 / 10^3: {large / small:.2f}x")


def _stream(conn: Connection, rank: int, rate: float, seconds: float) -> None:
    """Writer process: post ``rate`` Metrics events per second for ``seconds``, like a logging worker."""
    writer = channel.EventWriter(conn, flush_interval=0.1)
    writer.send(Started(rank, os.getpid(), "cpu"))
    start = time.monotonic()
    total = int(rate * seconds)
    for i in range(total):
        writer.post(Metrics(rank, i, {"train/loss": 1.0 / (i + 1), "lr": 1e-3}, time.time()))
        if i % 10 == 9:
            delay = start + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    writer.close()


class NullSink:
    """A sink that does nothing: the cost of the loop and of unpickling alone."""

    def start(self, info: RunInfo) -> None: ...

    def handle(self, event: Event) -> None: ...

    def finish(self, outcome: RunOutcome) -> None: ...


def _supervise(sink: object, seconds: float, rate_per_writer: float) -> tuple[float, float, int]:
    """Fork 2 writers, feed their events to ``sink`` until both close; return (cpu s, wall s, events)."""
    ctx = mp.get_context("fork")
    readers, procs = [], []
    for rank in range(2):
        reader, conn = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_stream, args=(conn, rank, rate_per_writer, seconds))
        proc.start()
        conn.close()
        readers.append(reader)
        procs.append(proc)
    sink.start(INFO)  # type: ignore[attr-defined]
    cpu0, wall0, count = time.process_time(), time.monotonic(), 0
    open_readers = list(readers)
    while open_readers:
        for reader in wait(open_readers):
            try:
                events = channel.read_events(reader)  # type: ignore[arg-type]
            except EOFError:
                open_readers.remove(reader)
                continue
            for event in events:
                sink.handle(event)  # type: ignore[attr-defined]
            count += len(events)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    sink.finish(RunOutcome("finished", wall))  # type: ignore[attr-defined]
    for proc in procs:
        proc.join(30)
    for reader in readers:
        reader.close()
    return cpu, wall, count


def bench_kernel_cpu(seconds: float, repeats: int) -> None:
    """Kernel CPU share with the dashboard vs a null sink while 2 writers stream 1,000 events/s in all."""
    results: dict[str, list[tuple[float, float, int]]] = {"null sink": [], "Dashboard": []}
    for _ in range(repeats):
        results["null sink"].append(_supervise(NullSink(), seconds, 500.0))
        dash = Dashboard(display=lambda obj: None, live_after=0.0)  # the widgets at once (no display handle)
        results["Dashboard"].append(_supervise(dash, seconds, 500.0))
        if dash.sink_errors:
            print(f"[kernel] dashboard errors: {dash.sink_errors}")
    print(f"[kernel] 2 forked writers x 500 metric events/s for {seconds:.0f} s, {repeats} repeats (widgets not on screen)")
    for name, runs in results.items():
        share = statistics.median(cpu / wall for cpu, wall, _ in runs)
        events = statistics.median(n / wall for _, wall, n in runs)
        print(f"[kernel] {name:10s} {share * 100:5.2f}% of one core ({events:.0f} events/s handled)")
    extra = statistics.median(c / w for c, w, _ in results["Dashboard"]) - statistics.median(
        c / w for c, w, _ in results["null sink"]
    )
    print(f"[kernel] dashboard cost over the null sink: {extra * 100:+.2f}% of one core (target <= 5%)")


def main() -> None:
    """Parse ``--quick`` and run the three measurements."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats, shorter streams")
    args = parser.parse_args()
    bench_log_call(calls=20_000 if args.quick else 100_000, repeats=3 if args.quick else 7)
    bench_redraw(repeats=3 if args.quick else 7)
    bench_kernel_cpu(seconds=3.0 if args.quick else 6.0, repeats=1 if args.quick else 3)


if __name__ == "__main__":
    main()
