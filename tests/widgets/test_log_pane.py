"""The log pane: final lines then live ones, the workers' colours as HTML, and where the whole output is."""

from __future__ import annotations

from notebook_accel.events import Log, RunInfo, RunOutcome
from notebook_accel.widgets.snapshot import summary_html, summary_text
from notebook_accel.widgets.run_model import LogBuffer, RunState
from notebook_accel.widgets.views import logs_html


def test_live_lines_follow_the_final_ones_and_are_replaced() -> None:
    b = LogBuffer(10)
    b.add(Log(0, "stdout", "epoch 1"))
    b.add(Log(0, "stderr", " 10%|#", partial=True))
    b.add(Log(1, "stdout", "rank one: loading", partial=True))
    b.add(Log(0, "stderr", " 50%|#####", partial=True))
    assert [(line.rank, line.text, line.live) for line in b] == [
        (0, "epoch 1", False), (0, " 50%|#####", True), (1, "rank one: loading", True),
    ]
    b.add(Log(0, "stderr", "100%|##########"))  # final: the live bar of rank 0's stderr is gone
    b.add(Log(1, "stdout", "", partial=True))  # cleared
    assert [line.text for line in b] == ["epoch 1", "100%|##########"]
    assert len(b) == 2 and b[-1].text == "100%|##########"


def test_the_buffer_is_bounded() -> None:
    b = LogBuffer(3)
    for i in range(10):
        b.add(Log(0, "stdout", f"line {i}"))
    assert [line.text for line in b] == ["line 7", "line 8", "line 9"]


def test_colours_render_as_html_and_only_errors_are_red() -> None:
    b = LogBuffer(20)
    b.add(Log(0, "stdout", "\x1b[32mpassed\x1b[0m <ok>"))
    b.add(Log(0, "stderr", "plain warning"))
    b.add(Log(0, "stderr", "INFO:train:epoch 1 done\n 40%|####      | 4/10 [00:01<00:02]"))
    b.add(Log(0, "stderr", "/x.py:3: UserWarning: careful\n  warnings.warn(msg)"))
    b.add(Log(0, "stderr", "ERROR:train:loss is nan"))
    b.add(Log(0, "stderr", 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: boom'))
    b.add(Log(0, "stderr", "after the traceback"))
    page = logs_html(b, with_rank=False, max_lines=20)
    assert '<span style="color:#0dbc79">passed</span> &lt;ok&gt;' in page
    for calm in ("plain warning", "INFO:train:epoch 1 done", " 40%|####", "/x.py:3: UserWarning: careful",
                 "  warnings.warn", "after the"):
        assert f'<span style="border-left:2px solid #d1d5db;padding-left:4px">{calm}' in page, calm
    for alarm in ("ERROR:train:loss is nan", "Traceback (most recent call last):", "  File \"x.py\"",
                  "ValueError: boom"):
        assert f'<span style="color:#b42318">{alarm}' in page, alarm
    assert page.count("#b42318") == 4
    assert "\x1b" not in page
    assert b[0].text == "passed <ok>" and b[0].styled.startswith("\x1b[32m")


def test_the_pane_says_where_the_whole_output_is() -> None:
    b = LogBuffer(1000, where="runs/20261124-101500-train")
    for i in range(300):
        b.add(Log(0, "stdout", f"line {i}"))
    page = logs_html(b, with_rank=False, max_lines=200)
    assert "showing the last 200 lines" in page and "<code>runs/20261124-101500-train/rank&lt;N&gt;.log</code>" in page
    assert "line 99<" not in page and "line 100\n" in page
    assert "showing" not in logs_html(b, with_rank=False, max_lines=1000)
    assert "full output" not in logs_html(LogBuffer(10), with_rank=False, max_lines=10)


def test_the_run_state_feeds_both_panes_and_the_snapshot_says_where() -> None:
    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train", log_dir="runs/x-train"))
    state.apply(Log(0, "stdout", "\x1b[1mhello\x1b[0m"))
    state.apply(Log(1, "stdout", "from one"))
    state.apply(Log(0, "stderr", "bar 3/9", partial=True))
    assert [line.text for line in state.logs_main] == ["hello", "bar 3/9"]
    assert [line.text for line in state.logs_all] == ["hello", "from one", "bar 3/9"]
    assert state.logs_main.where == "runs/x-train"
    state.apply(Log(0, "stderr", "bar 9/9"))
    state.finish(RunOutcome("finished", 1.0))
    assert "full output of every rank: runs/x-train/rank<N>.log" in summary_text(state, 1.0)
    assert "\x1b" not in summary_text(state, 1.0) and "runs/x-train/rank&lt;N&gt;.log" in summary_html(state, 1.0)


def test_a_pane_without_output_has_its_box_with_a_grey_line_and_lines_move_nothing() -> None:
    """The box has its full height before the first line (a grey line inside), so the first lines move nothing."""
    empty = logs_html(LogBuffer(10), with_rank=False, max_lines=10)
    assert "no output yet" in empty and "height:180px" in empty and "border:1px" in empty
    b = LogBuffer(10)
    b.add(Log(0, "stdout", "hello\n"))
    box = logs_html(b, with_rank=False, max_lines=10)
    assert "height:180px" in box and "max-height" not in box and "padding:4px" in box and "border:1px" in box
    assert "no output yet" not in box
