"""Real-browser test: nothing of a run's output overflows its box at a 1,000 px window with the side panel open.

JupyterLab (its file browser open beside the notebook: a ~570 px output area) and Notebook 7 (its left panel
opened where it has one) in headless Chromium run two launches: a training run with four metric groups (curves,
the table of values, output lines longer than the pane) and a run that hangs until its timeout (the long verdict
naming who waited where). While each runs (about twice a second) and once its result shows, every element of the
output is compared with the output's box and with its own scroll box (:data:`FIT_JS`): an element that reaches
past the output's edge, or a box that needs a sideways scroll to show what it holds, is cut. The text checks of
test_jupyterlab.py (:data:`~tests.browser.page_checks.OVERFLOW_JS`) run too. Screenshots go to
``build/browser/fit-<front end>-*.png``; skips as test_jupyterlab.py does.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import pytest

from tests.browser.page_checks import OVERFLOW_JS
from tests.browser.lab_session import served_notebook
from tests.browser.test_jupyterlab import FRONT_ENDS, SHOTS, _cell, _open, _run_all

pytestmark = pytest.mark.timeout(420)

SETUP = '''\
import time
from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.launcher import LaunchTimeoutError

def train_with_four_metric_groups(pause):
    accelerator = Accelerator()
    for step in range(40):
        accelerator.log({"train/loss": 1 / (step + 1), "eval/loss_of_the_held_out_validation_split": 2 / (step + 1),
                         "optimizer/learning_rate": 0.1, "system/throughput_samples_per_second": 100.0 + step},
                        step=step)
        if step % 10 == 0:
            print("a line longer than the output pane is wide, " * 6 + f"step {step}")
        time.sleep(pause)

def wait_in_a_collective_with_a_long_name():
    import torch
    accelerator = Accelerator()
    time.sleep(0 if accelerator.is_main_process else 60)  # rank 1 sleeps while rank 0 waits for it
    accelerator.reduce(torch.ones(1))
'''
CELLS = (
    'notebook_launcher(train_with_four_metric_groups, args=(0.1,), num_processes=2)',
    'try:\n    notebook_launcher(wait_in_a_collective_with_a_long_name, num_processes=2, timeout=8)\n'
    'except LaunchTimeoutError:\n    print("stopped by its timeout")',
)
DONE = ("train_with_four_metric_groups: finished in", "wait_in_a_collective_with_a_long_name: timeout in")

# Every element of each output of ``root`` (a cell) that reaches past its output's box sideways, or whose own box
# needs a sideways scroll to show what it holds (the parts of an SVG drawing aside: the drawing is checked whole).
FIT_JS = """(root) => {
  const bad = [];
  const name = el => el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' && el.className
    ? '.' + el.className.trim().split(/\\s+/)[0] : '') + ` "${(el.innerText || el.textContent || '').trim().slice(0, 50)}"`;
  for (const out of root.querySelectorAll('.jp-OutputArea-output')) {
    const box = out.getBoundingClientRect();
    for (const el of out.querySelectorAll('*')) {
      if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
      if (!el.getClientRects().length) continue;
      const r = el.getBoundingClientRect();
      if (r.width < 1 || r.height < 1) continue;
      if (r.right > box.right + 1 || r.left < box.left - 1) {
        bad.push(`${name(el)} spans ${r.left | 0}-${r.right | 0}px in an output of ${box.left | 0}-${box.right | 0}px`);
      }
      const cs = getComputedStyle(el);
      if (['auto', 'scroll', 'hidden', 'clip'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1) {
        bad.push(`${name(el)} holds ${el.scrollWidth}px in ${el.clientWidth}px`);
      }
    }
  }
  return bad;
}"""


def _open_side_panel(page: Any, front_end: str) -> str:
    """Leave JupyterLab's file browser open (close its news toast); open Notebook 7's left panel if it has one.
    Returns what was done."""
    try:
        page.locator(".jp-toast-button, .Toastify button").get_by_text("No", exact=True).click(timeout=3_000)
    except Exception:  # noqa: BLE001 - no toast this time
        pass
    if front_end == "jupyterlab":
        if not page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").count():
            page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab").first.click()
        return "file browser open"
    width = page.locator(".jp-Notebook").first.bounding_box()["width"]
    for path in (("File Browser",), ("Left Sidebar", "Show Table of Contents")):  # its View menu's side panels
        try:
            page.get_by_role("menuitem", name="View", exact=True).click(timeout=5_000)
            for label in path:
                page.locator(".lm-Menu-itemLabel").get_by_text(label, exact=True).first.click(timeout=5_000)
        except Exception:  # noqa: BLE001 - this Notebook 7 has no such menu item
            page.keyboard.press("Escape")
            continue
        time.sleep(1.0)
        narrower = page.locator(".jp-Notebook").first.bounding_box()["width"]
        if narrower < width - 100:
            return f"{' > '.join(path)} open (notebook {width:.0f} -> {narrower:.0f}px)"
    return "no side panel in this Notebook 7"


def _watch(page: Any, index: int, until: str, front_end: str, problems: list[str]) -> float:
    """Check cell ``index`` about twice a second until ``until`` shows, then its result; return the output's
    width."""
    cell = _cell(page, index)
    deadline = time.monotonic() + 150
    shot = False
    while time.monotonic() < deadline and not cell.get_by_text(until).count():
        try:
            problems += [f"cell {index} live: {p}" for p in cell.evaluate(FIT_JS) + cell.evaluate(OVERFLOW_JS)]
            if not shot and cell.locator(".nacc-dashboard svg polyline").count():
                time.sleep(1.5)
                cell.screenshot(path=str(SHOTS / f"fit-{front_end}-{index}-live.png"))
                shot = True
        except Exception:  # noqa: BLE001 - the view is being replaced by the result at this moment
            pass
        time.sleep(0.5)
    time.sleep(1.5)  # the result's image decoded, the exception printed
    cell.screenshot(path=str(SHOTS / f"fit-{front_end}-{index}-final.png"))
    problems += [f"cell {index} result: {p}" for p in cell.evaluate(FIT_JS) + cell.evaluate(OVERFLOW_JS)]
    return float(cell.locator(".jp-OutputArea-output").first.bounding_box()["width"])


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
def test_nothing_of_the_output_is_cut_at_1000_px_with_the_side_panel_open(front_end: str) -> None:
    if front_end == "notebook7" and importlib.util.find_spec("notebook") is None:
        pytest.skip("notebook>=7 is not installed (pip install 'notebook>=7', part of the browser extra)")
    problems: list[str] = []
    with served_notebook((SETUP, *CELLS), 1000, 1600) as (browser, base):
        page = browser.new_page()
        _open(page, base, FRONT_ENDS[front_end])
        time.sleep(1.0)
        panel = _open_side_panel(page, front_end)
        _run_all(page)
        widths = [_watch(page, index, until, front_end, problems) for index, until in zip((1, 2), DONE)]
        texts = [str(_cell(page, i).locator(".jp-OutputArea").inner_text()) for i in (1, 2)]
    print(f"\n[{front_end}] {panel}; output widths {[round(w) for w in widths]}px; {len(problems)} problems")
    for problem in dict.fromkeys(problems):
        print(f"  {problem}")
    assert DONE[0] in texts[0] and DONE[1] in texts[1], texts
    assert "rank 1 was not in a collective (time.sleep at Cell In[" in texts[1], texts[1]  # the verdict, whole
    assert not problems, list(dict.fromkeys(problems))[:10]
