"""The rules the browser test applies to sampled frames (no browser needed)."""

from __future__ import annotations

from tests.browser.page_checks import Frame, height_jumps, inconsistent, parse_duration


def test_durations_in_the_one_format_parse() -> None:
    assert [parse_duration(t) for t in ("4.2s", "5m 35s", "1h 02m 03s", "05:35", "")] == [4.2, 335, 3723, None, None]


def test_a_running_header_over_ended_ranks_is_inconsistent() -> None:
    frame = Frame.from_page({"t": 1.0, "header": "train · running · 4.2s · 2 processes", "ranks": ["finished"] * 2,
                             "height": 500})
    assert frame.clock == 4.2 and "every rank has ended" in inconsistent(frame)
    assert inconsistent(Frame(1.0, "finishing", 4.2, ("finished", "finished"), 500)) == ""
    assert inconsistent(Frame(1.0, "running", 4.2, ("running", "finished"), 500)) == ""
    assert "no rank failed" in inconsistent(Frame(1.0, "timeout", 5.2, ("failed", "failed"), 500))
    assert inconsistent(Frame(1.0, "timeout", 5.2, ("stopped", "stopped"), 500)) == ""


def test_heights_beyond_ten_percent_of_the_first_frame_are_jumps() -> None:
    frames = [Frame(0.0, "running", 0.0, (), 500), Frame(1.0, "running", 1.0, (), 540),
              Frame(2.0, "running", 2.0, (), 560)]
    assert height_jumps(frames) == ["560px at 2.0s (first full frame 500px at 0.0s)"]
    growing = [Frame(0.0, "running", 0.0, (), 300), Frame(1.0, "running", 1.0, (), 480, (True, False)),
               Frame(2.0, "running", 2.0, (), 660, (True, True)), Frame(3.0, "running", 3.0, (), 700, (True, True)),
               Frame(4.0, "running", 4.0, (), 900, (True, True))]
    assert height_jumps(growing) == ["900px at 4.0s (first full frame 660px at 2.0s)"]  # grown once, then jumped
    compact = [Frame(0.0, "starting", 0.0, (), 53, compact=True), Frame(2.0, "running", 2.0, (), 736),
               Frame(3.0, "running", 3.0, (), 736, (True, True))]
    assert height_jumps(compact) == []  # the compact line grows once into the dashboard: not a jump
    assert Frame.from_page({"t": 0, "header": "train · starting · 0.0s", "ranks": [], "height": 53,
                            "compact": True}).compact


def test_the_overflow_check_finds_cut_text_in_a_real_page() -> None:
    import importlib.util
    from pathlib import Path

    import pytest

    from tests.browser.page_checks import OVERFLOW_JS, RED_LINES_JS

    chromium = Path("/usr/bin/chromium")
    if importlib.util.find_spec("playwright") is None or not chromium.exists():
        pytest.skip("playwright and /usr/bin/chromium are needed")
    from playwright.sync_api import sync_playwright

    page_html = (
        '<div id="root">'
        '<div style="width:60px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis">a long label, cut off</div>'
        '<select style="width:70px"><option>SHARDED_STATE_DICT</option></select>'
        '<select style="width:300px"><option value="x"></option></select>'
        '<div style="width:400px;overflow:hidden;white-space:nowrap">this one fits</div>'
        '<div style="width:90px;white-space:nowrap;overflow-x:auto">a legend scrolled out of sight</div>'
        '<span style="display:inline-flex;width:60px;white-space:nowrap">drawn over the next</span>'
        '<div class="nacc-logs"><span style="color:#b42318">Traceback</span><span>INFO ok</span></div>'
        "</div>"
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_content(page_html)
            root = page.locator("#root")
            problems = root.evaluate(OVERFLOW_JS)
            red = root.evaluate(RED_LINES_JS)
        finally:
            browser.close()
    assert len(problems) == 5, problems
    assert "a long label, cut off" in problems[0] and "SHARDED_STATE_DICT" in problems[1] and "blank" in problems[2]
    assert "a legend scrolled out of sight" in problems[3] and "drawn over the next" in problems[4]
    assert red == ["Traceback"]
