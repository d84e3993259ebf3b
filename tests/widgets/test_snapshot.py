"""Tests for notebook_accel.widgets.snapshot and views: the static summary and the HTML fragments."""

from __future__ import annotations

import base64

import pytest

from notebook_accel.events import EngineReady, Failed, Log, Metrics, RunInfo, RunOutcome, Started
from notebook_accel.widgets import views
from notebook_accel.widgets.snapshot import StaticResult, format_duration, summary_html, summary_text
from notebook_accel.widgets.run_model import RunState


def _finished_state() -> RunState:
    s = RunState(RunInfo(1, ("cpu",), "gloo", "fit", mixed_precision="bf16"))
    s.apply(Started(0, 9, "cpu"))
    s.apply(Metrics(0, 5, {"train/loss": 0.123456789, "weird<name>": 1.0}, 0.0))
    s.finish(RunOutcome("finished", 75.0))
    return s


def test_format_duration() -> None:
    assert [format_duration(x) for x in (None, 0.04, 59.94, 75, 3725)] == ["?", "0.0s", "59.9s", "1m 15s", "1h 02m 05s"]


def test_summary_text_and_html() -> None:
    s = _finished_state()
    text = summary_text(s, 75.0)
    assert text.splitlines()[0] == "fit: finished in 1m 15s (1 process, gloo)"
    assert "train/loss = 0.12346 (step 5)" in text and "ranks: 0=finished" in text
    page = summary_html(s, 75.0)
    assert "weird&lt;name&gt;" in page and "<td>0.12346</td>" in page


def test_summary_keeps_the_main_process_last_output_lines() -> None:
    s = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "fit"))
    for i in range(30):
        s.apply(Log(0, "stdout", f"epoch {i} <ok>"))
    s.apply(Log(1, "stdout", "rank one chatter"))
    s.finish(RunOutcome("finished", 2.0))
    text = summary_text(s, 2.0)
    assert "last output of rank 0:" in text and "  epoch 29 <ok>" in text
    assert "epoch 9 " not in text and "epoch 10 " in text  # only the last 20 lines
    assert "rank one chatter" not in text
    page = summary_html(s, 2.0)
    assert "epoch 29 &lt;ok&gt;" in page and "<ok>" not in page


def test_static_result_inlines_the_curves_only_when_there_are_some() -> None:
    s = _finished_state()
    assert "<img" not in StaticResult(s, None, 1.0).html
    page = StaticResult(s, b"\x89PNG...", 1.0)._repr_mimebundle_()["text/html"]
    encoded = base64.b64encode(b"\x89PNG...").decode()
    assert f'src="data:image/png;base64,{encoded}"' in page


def test_the_header_names_torchao_for_fp8() -> None:
    s = RunState(RunInfo(2, ("cuda:0", "cuda:1"), "nccl", "train", mixed_precision="fp8"))
    assert views.header_html(s, 1.0).endswith(" &middot; fp8 (torchao)</div>")


def test_views_escape_user_text() -> None:
    s = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "<fn>", mixed_precision="fp16"))
    s.apply(Log(1, "stderr", "<script>alert(1)</script>"))
    s.apply(Failed(1, "KeyError", "'<k>'", "tb <here>"))
    assert "&lt;fn&gt;" in views.header_html(s, 1.0) and "fp16" in views.header_html(s, 1.0)
    assert "<script>" not in views.logs_html(s.logs_all, with_rank=True, max_lines=10)
    assert "tb &lt;here&gt;" in views.error_html(s)
    assert views.progress_text(s)[1].startswith("no progress yet")
    assert "no metrics logged yet" in views.metrics_html(s)
    assert "no output yet" in views.logs_html([], with_rank=False, max_lines=10)


def test_the_engine_is_in_the_header_and_the_static_result() -> None:
    s = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "fit", engine="FSDP FULL_SHARD"))
    assert "<b>FSDP FULL_SHARD</b>" in views.header_html(s, 1.0)  # the launch config's, before any worker
    s.apply(EngineReady(1, "what rank 1 thinks"))  # only the main process names it
    s.apply(EngineReady(0, "DeepSpeed ZeRO-3 (offload: optimizer)"))
    assert "DeepSpeed ZeRO-3 (offload: optimizer)" in views.header_html(s, 1.0)
    s.finish(RunOutcome("finished", 3.0))
    assert summary_text(s, 3.0).splitlines()[0] == "fit: finished in 3.0s (2 processes, gloo, DeepSpeed ZeRO-3 " \
                                                    "(offload: optimizer))"
    assert "DeepSpeed ZeRO-3 (offload: optimizer)" in summary_html(s, 3.0)
    plain = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "fit"))
    assert "<b>" not in views.header_html(plain, 1.0).split("&middot;", 1)[1]  # no engine named: nothing shown


def test_the_saved_result_names_each_ranks_node_only_when_the_run_spans_machines() -> None:
    local = _finished_state()
    assert "ranks: 0=finished" in summary_text(local, 1.0).splitlines()  # as it always was
    assert ">node<" not in StaticResult(local, None, 1.0, views.ranks_html(local, with_detail=False)).html
    s = RunState(RunInfo(3, ("cuda:0",) * 3, "nccl", "fit"))
    s.apply(Started(0, 9, "cuda:0", node="10.0.0.1"))
    s.apply(Started(1, 9, "cuda:0", node="10.0.0.2"))  # rank 2 never started: its node is not known
    s.finish(RunOutcome("failed", 2.0, "rank 2 did not start", (2,)))
    assert "ranks: 0=stopped on 10.0.0.1, 1=stopped on 10.0.0.2, 2=failed" in summary_text(s, 2.0).splitlines()
    page = StaticResult(s, None, 2.0, views.ranks_html(s, with_detail=False)).html
    assert ">node</th>" in page and ">10.0.0.1</td>" in page and ">10.0.0.2</td>" in page


def test_a_restart_is_said_live_and_in_the_saved_result() -> None:
    """max_restarts: which restart, from where and after what, above the run (issue 49 item 3)."""
    from notebook_accel.events import RunInfo, RunOutcome
    from notebook_accel.widgets.run_model import RunState
    from notebook_accel.widgets.snapshot import summary_html, summary_text
    from notebook_accel.widgets.views import header_html

    line = "restart 1 of 2 from /ckpt/checkpoint_0 after rank 1: its process on node 10.0.0.2 ended without a result"
    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train", restart=line))
    assert line in header_html(state, 1.0)
    state.finish(RunOutcome("finished", 2.0))
    assert summary_text(state, 2.0).splitlines()[1] == line and line in summary_html(state, 2.0)
    first = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
    assert "restart" not in header_html(first, 1.0) and "restart" not in summary_text(first, 1.0)


def test_the_saved_result_keeps_error_lines_red_and_logs_in_a_fixed_width_font() -> None:
    # the live pane drew these red; the saved result and its HTML export showed them plain, in the page's text font
    s = RunState(RunInfo(1, ("cpu",), "gloo", "fit"))
    for text in ("INFO:train:epoch 1 starts", "ERROR:train:the loss is nan", "Traceback (most recent call last):",
                 '  File "x.py", line 1, in f', "ValueError: boom", "epoch 1 done"):
        s.apply(Log(0, "stderr", text))
    s.finish(RunOutcome("failed", 1.0, "ValueError: boom"))
    page = summary_html(s, 1.0)
    pre = page.split("<pre", 1)[1].split("</pre>", 1)[0]
    assert "monospace" in pre.split(">", 1)[0]
    red = '<span style="color:#b42318">'
    for text in ("ERROR:train:the loss is nan", "Traceback (most recent call last):", "ValueError: boom"):
        assert f"{red}{text}</span>" in pre, pre
    assert f"{red}INFO" not in pre and f"{red}epoch 1 done" not in pre and "INFO:train:epoch 1 starts" in pre


def test_our_static_outputs_go_to_ipython_as_display_data_without_its_formatters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    from notebook_accel.widgets.snapshot import Summary, ipython_display

    calls: list[tuple[object, dict[str, object]]] = []

    class Handle:
        def update(self, obj: object, **kwargs: object) -> None:
            calls.append((obj, kwargs))

    def display(obj: object, **kwargs: object) -> Handle:
        calls.append((obj, kwargs))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    handle = ipython_display(Summary("<b>frame</b>", "frame"))
    handle.update(Summary("<b>result</b>", "result"))
    widget = object()  # anything else (the widgets) still goes through IPython's formatters
    handle.update(widget)
    assert calls == [({"text/html": "<b>frame</b>", "text/plain": "frame"}, {"raw": True, "display_id": True}),
                     ({"text/html": "<b>result</b>", "text/plain": "result"}, {"raw": True}),
                     (widget, {})]
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kwargs: None)  # outside IPython: no handle
    assert ipython_display(Summary("a", "b")) is None


def test_the_saved_result_says_where_the_workers_ran() -> None:
    """The live header names the cluster; the result that replaces it (what a saved notebook keeps) did not."""
    state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train", cluster="Ray cluster 10.0.0.1:6379"))
    state.finish(RunOutcome("finished", 3.0))
    result = StaticResult(state, None, 3.0)
    assert repr(result).splitlines()[0] == "train: finished in 3.0s (2 processes, gloo, Ray cluster 10.0.0.1:6379)"
    assert "Ray cluster 10.0.0.1:6379)</b>" in result._repr_mimebundle_()["text/html"]
