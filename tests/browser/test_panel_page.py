"""The system panel in a real browser, without Jupyter: no text cut or drawn over its neighbour at the widths the
dashboard is read at (a 1,000 px and a 1,400 px wide notebook leave about 870 and 1,270 px to an output), live
and in the final result. Screenshots go to ``build/browser/panel-<width>.png``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.events import RankSystem, StepTimes, SystemSample
from notebook_accel.widgets.system_panel import panel_html
from notebook_accel.widgets.system_state import SystemState
from tests.browser.page_checks import OVERFLOW_JS

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "build" / "browser"
GIB = 1024**3

if importlib.util.find_spec("playwright") is None or not CHROMIUM.exists():
    pytest.skip("playwright and /usr/bin/chromium are needed", allow_module_level=True)


def _state() -> SystemState:
    """Two CPU ranks under a memory limit, one spending most of its step in communication (the longest words)."""
    state = SystemState()
    for t in range(5):
        state.apply(SystemSample(float(t), tuple(RankSystem(r, 61.0 + t, int(1.3 * GIB), int(1.4 * GIB),
                                                            memory_limit=8 * GIB, memory_group_usage=3 * GIB)
                                                 for r in range(2)), 5 * GIB, 16 * GIB))
    state.apply(StepTimes(0, 20, 2.0, 0.05, 0.1, 0.05, 1.72, 0.05))
    state.apply(StepTimes(1, 20, 2.0, 0.92, 0.6, 0.3, 0.1, 0.05, 2))
    return state


@pytest.mark.parametrize("width", [870, 1270])
def test_the_system_panels_text_fits_live_and_final(width: int) -> None:
    state = _state()
    page_html = (f'<div id="root" style="width:{width}px;font-family:sans-serif">{panel_html(state)}'
                 f'<hr>{panel_html(state, final=True)}</div>')
    problems, _ = render_and_check(page_html, width, f"panel-{width}.png")
    assert problems == [], problems


def render_and_check(page_html: str, width: int, shot: str, measure: str = "r => 0") -> tuple[list[str], Any]:
    """Show ``page_html`` (its ``#root``) in chromium at ``width`` + a margin: the overflow check's problems and what
    the ``measure`` script returns for ``#root``; the screenshot goes to ``build/browser/<shot>``."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width + 40, "height": 400})
            page.set_content(page_html)
            problems = page.locator("#root").evaluate(OVERFLOW_JS)
            measured = page.locator("#root").evaluate(measure)
            page.locator("#root").screenshot(path=str(SHOTS / shot))
        finally:
            browser.close()
    return list(problems), measured


# Past the text check: an element (a chart too) that reaches beyond the right edge of ``root``, a box scrolled
# sideways, or a box that hides lines below its height. One line per problem.
CUT_JS = """(root) => {
  const bad = [];
  const right = root.getBoundingClientRect().right;
  for (const el of root.querySelectorAll('*')) {
    if (!el.getClientRects().length) continue;
    const box = el.getBoundingClientRect();
    if (box.right > right + 1) bad.push(`${el.tagName} ends at ${box.right | 0}px, past ${right | 0}px`);
    if (el.tagName === 'DIV' && el.scrollWidth > el.clientWidth + 1)
      bad.push(`a box scrolls ${el.scrollWidth}px in ${el.clientWidth}px`);
    if (el.tagName === 'DIV' && el.scrollHeight > el.clientHeight + 1 && getComputedStyle(el).overflowY !== 'visible')
      bad.push(`"${el.innerText.trim().slice(0, 60)}" hides ${el.scrollHeight - el.clientHeight}px`);
  }
  return bad;
}"""


def test_curves_and_a_long_verdict_fit_a_narrow_output() -> None:
    # JupyterLab at 1,000 px with its file browser open leaves 568 px: two charts and a long verdict must fit
    from notebook_accel.widgets.series import Series
    from notebook_accel.widgets.svg import curves_svg

    series = {name: Series() for name in ("train/loss", "eval/accuracy")}
    for step in range(50):
        for name, s in series.items():
            s.append(step, 1.0 / (step + 1))
    state = _state()
    long = ("communication-bound: rank 0 waits 61% of each step for its peers in all_reduce (accelerator.backward "
            "at Cell In[12], line 18) while rank 1 waits 46% for its DataLoader; raise num_workers (now 2) or make "
            "loading cheaper, then look at the slower rank's data")
    state.verdict = lambda: long  # type: ignore[method-assign]  # three lines at this width
    width = 568
    page_html = (f'<div id="root" style="width:{width}px;font-family:sans-serif">{curves_svg(series)}'
                 f'{panel_html(state, final=True)}</div>')
    _, cut = render_and_check(page_html, width, "curves-568.png", CUT_JS)
    assert cut == [], cut
