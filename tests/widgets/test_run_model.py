"""Tests for notebook_accel.widgets.run_model: the run model fed by events, without widgets."""

from __future__ import annotations

import pytest

from notebook_accel.events import Exited, Failed, Finished, Log, Metrics, Progress, RunInfo, RunOutcome, Started
from notebook_accel.widgets.run_model import RunState, group_of, label_of


def _state(n: int = 2, **kw: int) -> RunState:
    return RunState(RunInfo(n, ("cpu",) * n, "gloo", "train"), **kw)


def test_rank_statuses_follow_the_events() -> None:
    s = _state()
    assert s.status == "starting" and [r.status for r in s.ranks.values()] == ["starting", "starting"]
    s.apply(Started(0, 100, "cuda:0"))
    s.apply(Started(1, 101, "cuda:1"))
    assert s.status == "running"
    assert (s.ranks[1].pid, s.ranks[1].device) == (101, "cuda:1")
    s.apply(Finished(0, 42))
    s.apply(Exited(0, 0))
    s.apply(Exited(1, 0))
    s.finish(RunOutcome("finished", 1.5))
    assert [r.status for r in s.ranks.values()] == ["finished", "finished"]
    assert s.status == "finished"


def test_first_failure_is_kept_and_the_others_are_stopped() -> None:
    s = _state(3)
    for r in range(3):
        s.apply(Started(r, 10 + r, "cpu"))
    s.apply(Failed(2, "ValueError", "bad shape", "Traceback ..."))
    s.apply(Failed(1, "RuntimeError", "later", "..."))
    s.apply(Exited(0, -15, "SIGTERM"))
    s.finish(RunOutcome("failed", 2.0, "rank 2 failed", (2,)))
    assert s.failure is not None and s.failure.rank == 2
    assert [r.status for r in s.ranks.values()] == ["stopped", "failed", "failed"]
    assert s.ranks[2].detail == "ValueError: bad shape"
    assert s.ranks[0].detail == "killed by SIGTERM"


def test_a_silent_crash_is_a_failure() -> None:
    s = _state()
    s.apply(Started(1, 5, "cpu"))
    s.apply(Exited(1, -11, "SIGSEGV"))
    assert s.ranks[1].status == "failed" and s.ranks[1].detail == "killed by SIGSEGV"
    s.apply(Exited(0, 3))
    assert s.ranks[0].status == "failed" and s.ranks[0].detail == "exit code 3"


def test_interrupt_marks_running_ranks_stopped() -> None:
    s = _state()
    s.apply(Started(0, 1, "cpu"))
    s.finish(RunOutcome("interrupted", 1.0, "KeyboardInterrupt"))
    assert s.status == "interrupted" and s.ranks[0].status == "stopped"


def test_metrics_make_series_and_latest_values() -> None:
    s = _state()
    s.apply(Metrics(0, 10, {"train/loss": 1.0, "lr": 0.1}, 0.0))
    s.apply(Metrics(0, 20, {"train/loss": 0.5, "eval/loss": 0.7}, 0.0))
    s.apply(Metrics(0, None, {"lr": 0.05}, 0.0))  # no step: the series' own count
    s.apply(Metrics(1, 20, {"train/loss": 0.6}, 0.0))  # another rank gets its own series
    assert s.latest == {"train/loss": (20, 0.5), "lr": (1, 0.05), "eval/loss": (20, 0.7), "train/loss (rank 1)": (20, 0.6)}
    assert s.series["train/loss"].points() == ([10, 20], [1.0, 0.5])
    assert s.groups() == {"loss": ["train/loss", "eval/loss", "train/loss (rank 1)"], "lr": ["lr"]}


def test_group_and_label() -> None:
    assert (group_of("train/loss"), label_of("train/loss")) == ("loss", "train")
    assert (group_of("lr"), label_of("lr")) == ("lr", "lr")
    assert (group_of("a/b/acc"), label_of("a/b/acc")) == ("acc", "a/b")
    assert (group_of("eval/loss (rank 1)"), label_of("eval/loss (rank 1)")) == ("loss", "eval (rank 1)")


def test_progress_rate_and_eta() -> None:
    s = _state()
    for i in range(11):
        s.apply(Progress(0, i * 10, 200, "train", 100.0 + i, 1, "loader"))
    assert s.progress.n == 100 and s.progress.rate == pytest.approx(10.0)
    assert s.progress.eta == pytest.approx(10.0)
    assert s.ranks[0].progress == "train 100/200"
    s.apply(Progress(0, 0, 200, "train", 200.0, 2, "loader"))  # a new epoch restarts the loop's rate
    assert s.progress.epoch == 2 and s.progress.rate is None and s.progress.eta is None


def test_rank_zero_drives_the_main_bar() -> None:
    s = _state()
    s.apply(Progress(0, 5, 10, "", 1.0))
    s.apply(Progress(1, 7, 10, "", 1.0))
    assert s.progress.n == 5 and s.ranks[1].progress == "7/10"


def test_a_rank_that_reports_first_never_moves_the_main_bar() -> None:
    """Every rank's loader reports: the bars follow the main process alone, nothing counted twice."""
    s = _state()
    s.apply(Progress(1, 3, 16, "train", 1.0, 1, "loader"))  # rank 1 is ahead of the main process
    assert s.run_progress.current is None and s.run_progress.overall(1.0) is None
    for n in (1, 2):
        s.apply(Progress(0, n, 16, "train", 1.0 + n, 1, "loader"))
        s.apply(Progress(1, n + 3, 16, "train", 1.0 + n, 1, "loader"))
    assert s.progress.n == 2 and s.run_progress.overall(3.0).done == 2  # type: ignore[union-attr]
    assert (s.ranks[0].progress, s.ranks[1].progress) == ("train 2/16", "train 5/16")


def test_logs_are_split_bounded_and_rank_zero_kept_apart() -> None:
    s = _state(max_log_lines=5)
    s.apply(Log(0, "stdout", "a\nb"))
    s.apply(Log(1, "stderr", "warning"))
    assert [(line.rank, line.text) for line in s.logs_all] == [(0, "a"), (0, "b"), (1, "warning")]
    assert [line.text for line in s.logs_main] == ["a", "b"]
    for i in range(10):
        s.apply(Log(0, "stdout", f"line {i}"))
    assert len(s.logs_main) == 5 and s.logs_main[-1].text == "line 9"


def test_unannounced_ranks_are_added() -> None:
    s = _state(1)
    s.apply(Started(3, 9, "cpu"))
    assert s.ranks[3].status == "running"


def test_another_node_renumbers_the_placeholder_rows() -> None:
    s = _state(2)  # node 1 of a 2-node run: global ranks 2 and 3
    s.apply(Started(3, 30, "cpu"))
    s.apply(Started(2, 20, "cpu"))
    s.apply(Log(2, "stdout", "from the node's main process"))
    s.apply(Metrics(2, 1, {"loss": 1.0}, 0.0))
    assert sorted(s.ranks) == [2, 3] and s.main_rank == 2
    assert [line.text for line in s.logs_main] == ["from the node's main process"]
    assert list(s.latest) == ["loss"]


def test_events_that_speak_for_every_rank_are_taken_without_a_rank() -> None:
    from notebook_accel.events import RankSystem, StepTimes, SystemSample

    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
    state.apply(SystemSample(0.0, (RankSystem(0, 50.0, 1, 1), RankSystem(1, 50.0, 1, 1)), 1, 2))
    state.apply(StepTimes(1, 5, 1.0, 0.1, 0.5, 0.3, 0.1, 0.1))
    assert set(state.ranks) <= {0, 1}

def test_ten_thousand_metric_names_are_bounded_in_what_is_kept_and_drawn() -> None:
    from notebook_accel.widgets.snapshot import summary_html, summary_text
    from notebook_accel.widgets.svg import curves_svg
    from notebook_accel.widgets.views import metrics_html

    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
    for step in range(3):
        state.apply(Metrics(0, step, {f"layer{i}/grad": float(i + step) for i in range(10_000)}, 0.0))
    state.apply(Metrics(1, 2, {"loss": 0.5}, 0.0))  # another rank's name, beyond the bound too
    assert len(state.series) == 48 and len(state.groups()) <= 48
    assert len(state.latest) == 200 and state.latest["layer0/grad"] == (2, 2.0)
    assert state.metrics_not_shown == 10_001 - 200
    assert "and 9801 more metrics not shown" in state.metrics_note()
    assert len(curves_svg(state.series)) < 200_000  # was 12 MB per redraw
    assert "9801 more metrics" in metrics_html(state) and metrics_html(state).count("<tr>") == 202
    state.finish(RunOutcome("finished", 1.0))
    assert "9801 more metrics" in summary_html(state, 1.0) and "9801 more metrics" in summary_text(state, 1.0)
    assert state.run_progress.steps.n == 2  # the progress fallback still follows the logged step


def test_a_few_metric_names_show_no_note() -> None:
    state = RunState(RunInfo(1, ("cpu",), "gloo", "train"))
    state.apply(Metrics(0, 1, {"loss": 0.5, "lr": 0.1}, 0.0))
    assert state.metrics_note() == "" and state.metrics_not_shown == 0 and set(state.series) == {"loss", "lr"}


def test_a_metrics_batch_gives_the_model_the_events_one_by_one_give() -> None:
    from notebook_accel.metrics_batch import MetricsBatch, pack

    posted = [Metrics(0, i, {"train/loss": 1.0 / (i + 1), "lr": 0.1}, float(i)) for i in range(2_000)]
    posted[777] = Metrics(0, 777, {"train/loss": 99.0, "lr": 0.1}, 777.0)  # a spike
    posted += [Metrics(0, None, {"eval/loss": 0.5 + i}, 3_000.0 + i) for i in range(5)]
    posted += [Metrics(0, 2_000 + i, {f"m{i % 7}": float(i)}, 4_000.0 + i) for i in range(50)]
    others = [Metrics(1, i, {"train/loss": 2.0}, float(i)) for i in range(300)]
    one, whole = _state(max_series=6, max_table=8), _state(max_series=6, max_table=8)
    for event in posted + others:
        one.apply(event, now=1.0)
    batches = pack(posted) + pack(others)
    assert [type(b) for b in batches] == [MetricsBatch, MetricsBatch]
    for batch in batches:
        whole.apply(batch, now=1.0)
    assert list(whole.series) == list(one.series)
    assert {n: s.points() for n, s in whole.series.items()} == {n: s.points() for n, s in one.series.items()}
    assert {n: s.count for n, s in whole.series.items()} == {n: s.count for n, s in one.series.items()}
    assert whole.latest == one.latest and whole.metrics_not_shown == one.metrics_not_shown == 3
    assert max(whole.series["train/loss"].points()[1]) == 99.0
    assert whole.run_progress.steps.n == one.run_progress.steps.n == 2_049
    assert whole.workers_spoke and whole.metrics_version > 0


def test_a_timeout_stops_the_running_ranks_and_their_rows_agree_with_the_header() -> None:
    s = _state()
    for r in range(2):
        s.apply(Started(r, 10 + r, "cpu"))
    s.apply(Exited(0, -15, "SIGTERM"))  # the launcher stops every worker when the time is up
    s.apply(Exited(1, -15, "SIGTERM"))
    s.finish(RunOutcome("timeout", 5.2, "the run did not finish within timeout=5.0s", (0, 1)))
    assert s.shown_status == "timeout"
    assert [r.status for r in s.ranks.values()] == ["stopped", "stopped"]
    assert s.ranks[0].detail == "stopped by the run's timeout"


def test_a_rank_that_only_lost_its_peer_was_stopped_not_failed() -> None:
    s = _state()
    for r in range(2):
        s.apply(Started(r, 10 + r, "cpu"))
    lost = "[gloo] Connection closed by peer [127.0.0.1]:29500"
    s.apply(Failed(0, "DistBackendError", lost, "..."))  # rank 0's report may come before the real failure
    s.apply(Exited(0, 1))
    s.apply(Failed(1, "ValueError", "boom on purpose", "..."))
    s.apply(Exited(1, 1))
    assert s.failure is not None and s.failure.rank == 1
    assert [r.status for r in s.ranks.values()] == ["stopped", "failed"]
    s.finish(RunOutcome("failed", 1.0, "rank 1: ValueError: boom on purpose", (1, 0)))  # the launcher names both
    assert [r.status for r in s.ranks.values()] == ["stopped", "failed"]
    assert "another rank ended under it" in s.ranks[0].detail


def test_a_rank_stopped_after_another_failed_stays_stopped_and_a_lone_lost_peer_still_fails_the_run() -> None:
    s = _state()
    s.apply(Failed(1, "ValueError", "boom", "..."))
    s.apply(Exited(0, -15, "SIGTERM"))
    s.finish(RunOutcome("failed", 1.0, "rank 1: ValueError: boom", (1, 0)))
    assert [r.status for r in s.ranks.values()] == ["stopped", "failed"]
    alone = _state(1)
    alone.apply(Failed(0, "RuntimeError", "Connection reset by peer", "..."))
    alone.finish(RunOutcome("failed", 1.0, "rank 0: RuntimeError: Connection reset by peer", (0,)))
    assert alone.ranks[0].status == "failed"  # no other rank to blame: the header's "failed" has its row


def test_the_progress_column_shows_one_loop_for_every_rank() -> None:
    from notebook_accel.widgets.views import ranks_html

    s = _state()
    s.apply(Progress(0, 32, 32, "train", 1.0, 32))
    s.apply(Progress(0, 3, 3, "epochs", 1.0, 3))  # rank 0's tqdm over the epochs reports last
    s.apply(Progress(1, 32, 32, "train", 1.0, 32))
    table = ranks_html(s)
    assert "<th" in table and "progress (train)" in table
    assert table.count(">32/32<") == 2 and "epochs" not in table


def _header(table: str) -> list[str]:
    import re

    return re.findall(r"<th [^>]*>([^<]*)</th>", table)


def test_a_local_run_has_no_node_column() -> None:
    from notebook_accel.widgets.views import ranks_html

    s = _state()
    s.apply(Started(0, 100, "cpu"))  # a forked worker: its node is this machine ("")
    s.apply(Started(1, 101, "cpu"))
    assert not s.spans_machines and s.ranks[0].node == ""
    assert _header(ranks_html(s)) == ["rank", "status", "device", "pid", ""]  # the table as it always was
    assert "node" not in ranks_html(s, with_detail=False)
    ray_here = _state()  # a Ray cluster of this machine alone: every rank on its loopback address
    for rank in (0, 1):
        ray_here.apply(Started(rank, 10 + rank, "cpu", node="127.0.0.1"))
    assert not ray_here.spans_machines and _header(ranks_html(ray_here)) == ["rank", "status", "device", "pid", ""]


def test_a_run_on_two_nodes_shows_each_ranks_node() -> None:
    from notebook_accel.widgets.views import ranks_html

    s = _state(3)
    s.apply(Started(0, 100, "cuda:0", node="10.0.0.1"))
    assert s.ranks[0].node == "10.0.0.1"
    s.apply(Started(1, 101, "cuda:0", node="10.0.0.2"))
    assert s.spans_machines and [r.node for r in s.ranks.values()] == ["10.0.0.1", "10.0.0.2", ""]
    table = ranks_html(s)
    assert _header(table) == ["rank", "status", "node", "device", "pid", ""]
    rows = table.split("<tr>")[2:]
    assert ">10.0.0.1</td>" in rows[0] and ">10.0.0.2</td>" in rows[1]
    assert rows[0].index("10.0.0.1") < rows[0].index("cuda:0")  # where first, then which device there
    assert "white-space:nowrap" in rows[0] and "overflow-wrap" not in rows[0]  # an address: one line
    long = _state(1)
    long.apply(Started(0, 7, "cpu", node="gpu-node-0017.us-east-2.compute.internal.example.org"))
    assert "overflow-wrap:anywhere" in ranks_html(long)  # a long host name wraps in its cell
    assert "10.0.0" not in rows[2]  # rank 2 has not started: its node is not known yet


def test_a_run_on_one_other_machine_names_it_and_ranks_here_read_this_machine() -> None:
    from notebook_accel.widgets.run_model import is_this_machine
    from notebook_accel.widgets.views import ranks_html

    remote = _state(1)
    remote.apply(Started(0, 7, "cuda:0", node="192.0.2.7"))  # TEST-NET-1: never an address of this machine
    assert remote.spans_machines and ">192.0.2.7</td>" in ranks_html(remote)
    mixed = _state()
    mixed.apply(Started(0, 7, "cpu"))
    mixed.apply(Started(1, 8, "cpu", node="gpu-node-7.cluster"))
    assert mixed.spans_machines and ">this machine</td>" in ranks_html(mixed)
    assert [is_this_machine(n) for n in ("", "127.0.0.1", "::1", "192.0.2.7", "gpu-node-7.cluster")] == [
        True, True, True, False, False]


def test_a_rank_the_launcher_found_dead_of_its_own_shows_failed_and_its_peer_stopped() -> None:
    """A lost node: the peer's lost connection arrives first, then the launcher's verdict on the dead rank (its own
    death, with the reason the error gives), however the stop had signalled it meanwhile (issue 43)."""
    from notebook_accel.widgets.views import error_html, ranks_html

    s = _state()
    for rank in (0, 1):
        s.apply(Started(rank, 100 + rank, "cpu", node=f"10.0.0.{rank + 1}"))
    s.apply(Failed(0, "RuntimeError", "Connection reset by peer [10.0.0.2]:4242", ""))
    s.apply(Exited(0, 1))
    s.apply(Exited(1, -9, "SIGKILL", "its process on node 10.0.0.2 ended without a result (it was killed, or Ray "
                                     "on that node stopped)"))
    assert [s.ranks[r].status for r in (0, 1)] == ["stopped", "failed"]
    assert s.ranks[1].detail.startswith("its process on node 10.0.0.2 ended")
    assert s.failure is not None and s.failure.rank == 1
    assert "rank 1 failed: its process on node 10.0.0.2" in error_html(s) and ": :" not in error_html(s)
    assert ">failed<" in ranks_html(s)
    stopped = _state()  # without the verdict, a SIGKILL after a failure is the launcher's stop, as before
    stopped.apply(Failed(0, "ValueError", "bad", ""))
    stopped.apply(Exited(1, -9, "SIGKILL"))
    assert stopped.ranks[1].status == "stopped"


def test_ranks_that_never_started_are_not_started_not_stopped() -> None:
    # a refused Ray reservation: no worker process ever ran, and "stopped" with no pid said one had
    from notebook_accel.widgets import views

    state = RunState(RunInfo(3, ("cpu",) * 3, "gloo", "train"))
    assert views.progress_text(state)[1].startswith("waiting for the workers")
    state.apply(Started(0, 4242, "cpu"))
    assert views.progress_text(state)[1].startswith("running: no report from the workers yet")  # as the table says
    state.finish(RunOutcome("failed", 4.7, "Ray could not reserve 3 workers"))
    assert [state.ranks[r].status for r in range(3)] == ["stopped", "not started", "not started"]
    assert ">not started<" in views.ranks_html(state)
