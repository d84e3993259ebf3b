"""The system panel: its model (events in, figures out), its HTML, the dashboard's lazy widget, the final lines."""

from __future__ import annotations

import re

import ipywidgets as w

from notebook_accel.events import Log, Metrics, RankSystem, RunInfo, RunOutcome, Started, StepTimes, SystemSample
from notebook_accel.monitor.summary import sample_line
from notebook_accel.widgets import Dashboard
from notebook_accel.widgets.snapshot import StaticResult
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.system_panel import panel_height, panel_html
from notebook_accel.widgets.system_state import SPARK_BUDGET, SystemState

GIB = 1024**3
INFO = RunInfo(2, ("cuda:0", "cuda:1"), "nccl", "train")


def _gpu(rank: int, util: float, used: float = 30.0) -> RankSystem:
    return RankSystem(rank, 98.0, int(1.5 * GIB), int(2.5 * GIB), util, int(used * GIB), 80 * GIB, int(31 * GIB),
                      64.0, 310.0)


def _cpu(rank: int, cpu: float, limit: int | None = None) -> RankSystem:
    return RankSystem(rank, cpu, int(0.5 * GIB), int(0.75 * GIB), memory_limit=limit,
                      memory_group_usage=None if limit is None else int(0.6 * GIB))


def _sample(t: float, *ranks: RankSystem) -> SystemSample:
    return SystemSample(t, ranks, 18 * GIB, 32 * GIB)


def _points(svg: str) -> list[str]:
    return [m.split() for m in re.findall(r'points="([^"]*)"', svg)]  # type: ignore[misc]


def test_gpu_figures_reach_the_panel() -> None:
    state = SystemState()
    state.apply(_sample(100.0, _gpu(0, 91.0), _gpu(1, 87.0)))
    state.apply(_sample(101.0, _gpu(0, 93.0, 30.2), _gpu(1, 85.0)))
    out = panel_html(state)
    assert 'data-rank="0"' in out and 'data-rank="1"' in out
    for text in ("93%", "85%", "30.2/80.0 GiB, peak 31.0", "64°C", "310 W", "CPU", "98%",
                 "1.5 GiB, peak 2.5", "18.0 GiB free of 32.0 GiB"):
        assert text in out, text
    assert out.count("<svg") == 12  # six sparklines per rank


def test_a_cpu_host_shows_what_exists_with_its_cgroup_limit() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 150.0, limit=4 * GIB)))
    state.apply(_sample(2.0, _cpu(0, 110.0, limit=4 * GIB)))
    out = panel_html(state)
    assert "110%" in out and "0.5 GiB, peak 0.8, limit 4.0" in out and "holds 0.6 GiB of a 4.0 GiB limit" in out
    assert "GPU" not in out.replace("forward+backward", "") and "°C" not in out
    assert out.count("<svg") == 2


def test_sparklines_keep_a_bounded_number_of_points_over_a_long_run() -> None:
    state = SystemState()
    for t in range(20_000):
        state.apply(_sample(float(t), _cpu(0, float(t % 97))))
    (cpu_points, memory_points) = _points(panel_html(state))
    assert 2 < len(cpu_points) <= 2 * (SPARK_BUDGET + 2) and len(memory_points) <= 2 * (SPARK_BUDGET + 2)
    xs = [float(p.split(",")[0]) for p in cpu_points]
    assert xs[0] == 2.0 and xs[-1] == 78.0 and xs == sorted(xs)  # the line spans the whole run, left to right


def test_the_sparkline_moves_with_new_samples() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 10.0)))
    state.apply(_sample(2.0, _cpu(0, 20.0)))
    before = _points(panel_html(state))
    state.apply(_sample(3.0, _cpu(0, 90.0)))
    assert _points(panel_html(state)) != before


def test_the_step_bar_splits_the_runs_steps_and_the_verdict_appears() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 100.0)))
    assert "none measured yet" in panel_html(state) and "no verdict" in panel_html(state)
    state.apply(StepTimes(0, 20, 2.0, 1.0, 0.6, 0.3, 0.0, 0.2, 0))  # half of each step waits for data
    out = panel_html(state)
    assert "100 ms" in out and "data wait 50%" in out and "forward+backward 30%" in out and "optimizer 10%" in out
    assert 'data-part="data" style="width:50.0%' in out and out.index("data wait 50%") < out.index("CPU")
    assert "verdict:</b> data-bound: rank 0 waits 50% of each step for its DataLoader" in out
    state.apply(StepTimes(0, 20, 2.0, 0.2, 1.4, 0.7, 0.0, 0.2, 0))  # the bar shows the run's steps so far
    assert 'data-part="data" style="width:30.0%' in panel_html(state) and "mean of 40 steps" in panel_html(state)


def _step_figures(text: str) -> list[tuple[str, str]]:
    """Each ``(ms, other %)`` a text shows: the bar's ``step 58 ms · other 89%``, the lines' ``58 ms a step: ...,
    other 89%``."""
    return (re.findall(r'step</span> (\d+) ms <span style="[^"]*">· other (\d+)%', text)
            + re.findall(r"(\d+) ms a step: [^<;]*other (\d+)%", text))


def test_the_step_bar_and_the_final_lines_show_one_step_time() -> None:
    # the issue: the bar said "step 55 ms · other 93%" (the last report), the final lines "58 ms a step … other 89%"
    dash, shown = _dashboard()
    dash.handle(_sample(1.0, _cpu(0, 95.0)))
    for seconds, other in ((0.58, 0.5), (0.52, 0.49), (0.55, 0.51)):  # three reports of 10 steps, mostly "other"
        dash.handle(StepTimes(0, 10, seconds + other, 0.01, seconds * 0.05, 0.02, 0.0, 0.01))
    dash.refresh()
    live = _step_figures(dash.system.widget.value)
    dash.finish(RunOutcome("finished", 3.0))
    (result,) = [x for x in shown if isinstance(x, StaticResult)]
    final = _step_figures(result._repr_mimebundle_()["text/html"])
    assert len(live) == 1 and len(final) == 2, (live, final)  # the bar live; the bar and the rank's line at the end
    assert set(live) == set(final) and len(set(final)) == 1, (live, final)


def test_run_state_feeds_the_panel_without_touching_the_rest() -> None:
    state = RunState(INFO)
    assert state.system is None
    version = state.version
    state.apply(_sample(1.0, _gpu(0, 90.0)))
    state.apply(StepTimes(1, 5, 0.5, 0.1, 0.3, 0.1, 0.05, 0.05))
    assert state.system is not None and set(state.system.ranks) == {0, 1}
    assert state.version == version  # the rank table is not redrawn for a sample


def _dashboard() -> tuple[Dashboard, list[object]]:
    shown: list[object] = []
    times = iter(range(1000, 10_000, 5))
    dash = Dashboard(clock=lambda: float(next(times)), display=shown.append, live_after=0.0)
    dash.start(INFO)
    return dash, shown


def _widgets(box: w.Widget) -> list[w.Widget]:
    out = [box]
    for child in getattr(box, "children", ()):
        out += _widgets(child)
    return out


def test_no_panel_widget_until_the_first_sample_then_one_at_the_bottom() -> None:
    dash, _ = _dashboard()
    dash.handle(Started(0, 11, "cuda:0"))
    dash.handle(Metrics(0, 1, {"loss": 1.0}, 0.0))
    dash.handle(Log(0, "stdout", "hi"))
    dash.refresh()
    before = _widgets(dash.view.root)
    assert dash.system.widget is None and not any("nacc-system" in x._dom_classes for x in before)
    assert dash.view.root.layout.padding == f"0 0 {panel_height(2)}px 0"  # its room is kept from the first frame
    dash.handle(_sample(1.0, _gpu(0, 77.0), _gpu(1, 66.0)))
    dash.refresh()
    after = _widgets(dash.view.root)
    assert len(after) == len(before) + 1 and dash.view.root.children[-1] is dash.system.widget  # below everything
    assert "77%" in dash.system.widget.value and "nacc-system" in dash.system.widget._dom_classes
    assert dash.system.widget.layout.height == f"{panel_height(2) - 4}px"
    # drawn over the room kept for it, which stays: the box's height does not move, in one message
    assert dash.view.root.layout.padding == f"0 0 {panel_height(2)}px 0"
    assert dash.system.widget.layout.margin == f"2px 0 -{panel_height(2) - 2}px 0"
    redraws = dash.system.redraws
    dash.refresh()
    assert dash.system.redraws == redraws  # nothing changed: not redrawn
    dash.handle(StepTimes(0, 10, 1.0, 0.1, 0.7, 0.3, 0.0, 0.1))
    dash.refresh()
    assert "data wait 10%" in dash.system.widget.value and len(_widgets(dash.view.root)) == len(after)


def test_the_final_result_has_a_line_per_rank_and_the_verdict() -> None:
    dash, shown = _dashboard()
    dash.handle(Started(0, 11, "cuda:0"))
    for t in range(3):
        dash.handle(_sample(float(t), _gpu(0, 80.0 + t), _gpu(1, 90.0)))
    dash.handle(StepTimes(0, 20, 2.0, 1.0, 0.6, 0.3, 0.0, 0.2, 2))
    dash.handle(StepTimes(1, 20, 2.0, 1.0, 0.6, 0.3, 0.0, 0.2, 2))
    dash.finish(RunOutcome("finished", 3.0))
    (result,) = [x for x in shown if isinstance(x, StaticResult)]
    bundle = result._repr_mimebundle_()
    line0 = ("system rank 0: mean GPU 81%, peak memory 2.5 GiB, peak GPU memory 31.0 GiB; 100 ms a step: data 50%, "
             "compute 30%, communication 0%, optimizer 10%, other 10%")
    assert line0 in bundle["text/plain"] and "system rank 1: mean GPU 90%" in bundle["text/plain"]
    verdict = "verdict: data-bound: every rank waits 50% of each step for its DataLoader; raise num_workers (now 2)"
    assert verdict in bundle["text/plain"] and verdict.replace(":", ":</b>", 1) in bundle["text/html"]
    assert 'class="nacc-system-summary"' in bundle["text/html"] and line0 in bundle["text/html"]
    assert 'class="nacc-system-panel"' in bundle["text/html"] and "<polyline" in bundle["text/html"]  # its last frame


def test_a_run_without_samples_leaves_no_system_lines() -> None:
    dash, shown = _dashboard()
    dash.handle(Started(0, 11, "cuda:0"))
    dash.finish(RunOutcome("finished", 1.0))
    (result,) = [x for x in shown if isinstance(x, StaticResult)]
    assert "system" not in result._repr_mimebundle_()["text/plain"] and dash.system.widget is None


def test_a_rank_heard_of_later_gets_its_row_and_the_height_follows() -> None:
    dash, _ = _dashboard()
    dash.handle(_sample(1.0, _cpu(0, 50.0), _cpu(1, 50.0)))
    dash.refresh()
    dash.handle(StepTimes(2, 5, 0.5, 0.1, 0.3, 0.1, 0.0, 0.05))
    dash.refresh()
    assert 'data-rank="2"' in dash.system.widget.value and "no sample yet" in dash.system.widget.value
    assert dash.system.widget.layout.height == f"{panel_height(3) - 4}px"


def test_the_static_frame_says_the_run_is_over() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 50.0)))
    assert "nothing clearly slows the run down (yet)" in panel_html(state)
    assert "nothing clearly slowed the run down<" in panel_html(state, final=True)


def test_after_a_rank_ends_the_panel_keeps_its_last_live_values_and_its_sparklines_end_there() -> None:
    state = SystemState()
    for t in range(3):
        state.apply(_sample(float(t), _cpu(0, 60.0)))
    gone = RankSystem(0, 0.0, 0, int(0.75 * GIB))  # the sampler reads a process tree that has ended as 0 bytes
    state.apply(_sample(3.0, gone))
    state.apply(_sample(4.0, gone))
    figures = state.ranks[0]
    assert figures.last is not None and figures.last.rss_bytes == int(0.5 * GIB)
    xs, ys = figures.sparks["memory"].points()
    assert xs[-1] == 2.0 and min(ys) > 0 and min(figures.sparks["cpu"].points()[1]) == 60.0
    final = panel_html(state, final=True)
    assert "mem</span> 0.5 GiB" in final and "0.0 GiB" not in final
    assert state.mean_use(0) == ("CPU", 60.0)


def test_the_final_frame_says_what_was_measured_not_what_is_awaited() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 50.0)))
    state.apply(StepTimes(1, 5, 0.5, 0.1, 0.3, 0.1, 0.0, 0.05))  # rank 1 reported steps, never a sample
    live, final = panel_html(state), panel_html(state, final=True)
    assert "steps: none measured yet" in live and "no sample yet" in live
    assert "yet" not in final.replace("(yet)", "")
    assert "steps: none measured<" in final and "no sample taken" in final


def test_the_compilers_memory_is_shown_apart_from_the_ranks_own() -> None:
    state = SystemState()
    state.apply(_sample(1.0, _cpu(0, 90.0), _cpu(1, 90.0)))
    assert "compiler" not in panel_html(state)  # no cell before a compiler ran
    compiling = RankSystem(1, 300.0, int(0.5 * GIB), int(0.75 * GIB), compiler_rss_bytes=int(2.9 * GIB))
    state.apply(_sample(2.0, _cpu(0, 90.0), compiling))
    assert "rank 1 cpu 300% 0.5 GiB + compiler 2.9 GiB ·" in sample_line(_sample(2.0, compiling, _cpu(0, 90.0)))
    state.apply(_sample(3.0, _cpu(0, 90.0), _cpu(1, 90.0)))  # done compiling: its processes ended
    out = panel_html(state, final=True)
    assert out.count("+ compiler</span> 0.0 GiB, peak 2.9") == 1 and "mem</span> 0.5 GiB, peak 0.8" in out
    assert state.peak_memory(1) == int(0.75 * GIB)  # the rank's own peak: none of the compiler's 2.9 GiB
    assert state.summary.lines()[1] == "rank 1: mean CPU 160%, peak memory 0.8 GiB (+ compiler 2.9 GiB)"
    assert "compiler" not in state.summary.lines()[0]


def test_a_view_that_grows_after_the_first_sample_keeps_the_panels_room() -> None:
    """The view grows when the run is known to be long (here 2 s, after the first sample): the panel comes with its
    room, not drawn over the cell below."""
    now = [0.0]
    dash = Dashboard(clock=lambda: now[0], display=lambda obj: _Handle(), live_after=0.5)
    dash.start(INFO)
    dash.handle(Started(0, 11, "cpu"))
    dash.handle(Started(1, 12, "cpu"))
    now[0] = 1.0
    dash.handle(_sample(1.0, _gpu(0, 77.0), _gpu(1, 66.0)))
    now[0] = 2.5
    dash.tick(now[0])
    assert dash.view is not None and dash.system.widget is not None
    assert dash.view.root.layout.padding == f"0 0 {panel_height(2)}px 0"


class _Handle:
    """A display handle that takes in-place updates."""

    def update(self, obj: object) -> None:
        pass
