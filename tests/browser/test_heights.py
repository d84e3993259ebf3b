"""Real-browser test: the cell's output holds its height from the first paint to the final result (JupyterLab).

A JupyterLab server serves one notebook per window width (1,000 and 1,400 px), each with three launches: a
multi-epoch training run (curves from its first batches), a background run that logs curves and ends by itself,
and a sub-second launch that logs and prints nothing (as tutorial 05's). Headless Chromium runs all cells and
samples every launch cell's first output (the dashboard, then its result) about 10 times a second. The rules:

- a run too short for curves shows one compact line from its first paint to its result (within 10%);
- a longer run starts as that line and grows once, to the dashboard's room, when it is known to be a long run
  (its first metric, or :data:`~notebook_accel.widgets.room.GROW_AFTER` seconds); from then on, through the first
  curve to the final result, its height stays within 10% of that grown frame, and it never shrinks.

The heights are printed (``pytest -s``); screenshots go to ``build/browser/heights-<width>-*.png``. Skips as
test_jupyterlab.py does when jupyterlab, playwright or ``/usr/bin/chromium`` is missing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.lab_session import served_notebook
from tests.browser.test_jupyterlab import SHOTS, _hide_left_panel, _open, _run_all

pytestmark = pytest.mark.timeout(420)

SETUP = '''\
import time
from notebook_accel import Accelerator, notebook_launcher

def train(pause):
    import torch
    accelerator = Accelerator()
    model, optimizer = torch.nn.Linear(4, 1), None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(128, 4), torch.randn(128, 1)),
                                         batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            accelerator.log({"train/loss": 1.0 / (1 + i + 16 * epoch)}, step=i + 16 * epoch)
            time.sleep(pause)
        accelerator.log({"eval/loss": 0.5 / (1 + epoch)}, step=16 * epoch + 15)
        accelerator.print(f"epoch {epoch} done")
    return 48

def slow(steps):
    accelerator = Accelerator()
    for step in range(steps):
        accelerator.log({"waited": step * 0.1}, step=step)
        time.sleep(0.1)

def report():
    return 1
'''
CELLS = {
    "multi-epoch": 'steps = notebook_launcher(train, args=(0.12,), num_processes=2)',
    "background": 'run = notebook_launcher(slow, args=(50,), num_processes=2, block=False)',
    "wait": 'run.result()',
    "sub-second": 'notebook_launcher(report, num_processes=2)',
}
LAUNCHES = {"multi-epoch": 1, "background": 2, "sub-second": 4}  # code cell of each launch
DONE = {"multi-epoch": "train: finished in", "background": "slow: finished in", "sub-second": "report: finished in"}

# Each launch cell's first output: its height, whether a curve is drawn, the first 80 characters of its text.
SAMPLE_JS = """(cells) => cells.map(i => {
  const cell = document.querySelectorAll('.jp-CodeCell')[i];
  const out = cell && cell.querySelector('.jp-OutputArea-child');
  if (!out) return null;
  return {t: performance.now() / 1000, h: out.getBoundingClientRect().height,
          curve: !!out.querySelector('svg polyline, img[alt="training curves"]'), text: out.innerText.slice(0, 300)};
})"""


def _sample(page: Any, name: str, width: int) -> list[dict[str, Any]]:
    """Sample every launch cell until each one's result shows; return the samples of each, keyed by launch."""
    samples: dict[str, list[dict[str, Any]]] = {n: [] for n in LAUNCHES}
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        raw = page.evaluate(SAMPLE_JS, list(LAUNCHES.values()))
        for launch, one in zip(LAUNCHES, raw):
            if one is not None and one["h"] > 0:
                samples[launch].append(one)
        if all(s and DONE[n] in s[-1]["text"] for n, s in samples.items()):
            break
        time.sleep(0.1)
    time.sleep(1.0)  # the result settles (its image decoded)
    for launch, one in zip(LAUNCHES, page.evaluate(SAMPLE_JS, list(LAUNCHES.values()))):
        samples[launch].append(one)
    page.screenshot(path=str(SHOTS / f"heights-{width}-{name}.png"), full_page=True)
    return samples  # type: ignore[return-value]


def _report(width: int, launch: str, samples: list[dict[str, Any]]) -> tuple[float, list[float]]:
    """Print the heights (each change with its time after the first paint, the first curve marked ``*``); return
    the grown frame's height (the first one over 1.5 times the first paint: the first paint when it never grew)
    and the heights from it to the final result."""
    heights = [s["h"] for s in samples]
    t0, steps, last = samples[0]["t"], [], -1.0
    curve_seen = False
    for s in samples:
        mark = "*" if s["curve"] and not curve_seen else ""
        curve_seen = curve_seen or s["curve"]
        if abs(s["h"] - last) >= 1 or mark:
            steps.append(f"{s['h']:.0f}px{mark}@{s['t'] - t0:.1f}s")
            last = s["h"]
    grown_at = next((i for i, h in enumerate(heights) if h > 1.5 * heights[0]), 0)
    print(f"\n[{width}px] {launch}: first paint {heights[0]:.0f}px, final result {heights[-1]:.0f}px; heights "
          f"{' -> '.join(steps)} (* first curve)")
    return heights[grown_at], heights[grown_at:]


@pytest.mark.parametrize("width", [1000, 1400])
def test_the_output_holds_its_height_from_the_first_paint_to_the_result(width: int) -> None:
    with served_notebook((SETUP, *CELLS.values()), width, 2400) as (browser, base):
        page = browser.new_page()
        _open(page, base, "lab/tree/run.ipynb")
        time.sleep(1.0)
        _hide_left_panel(page)
        _run_all(page)
        samples = _sample(page, "final", width)
    for launch, seen in samples.items():
        assert seen and DONE[launch] in seen[-1]["text"], (launch, seen[-1:] if seen else "never shown")
    reports = {launch: _report(width, launch, seen) for launch, seen in samples.items()}
    for launch, (grown, after) in reports.items():
        assert max(after) <= 1.10 * grown and min(after) >= 0.90 * grown, (launch, grown, after)
    short = [s["h"] for s in samples["sub-second"]]
    assert max(short) <= 1.10 * short[0] and min(short) >= 0.90 * short[0], short  # compact from the start
    assert short[-1] <= 80, short  # one compact line, not the dashboard's room
    for launch in ("multi-epoch", "background"):
        heights = [s["h"] for s in samples[launch]]
        grows = [i for i in range(1, len(heights)) if heights[i] > 1.10 * heights[i - 1]]
        assert len(grows) <= 1, (launch, heights)  # it grows once, when the run is known to be long
        assert any(s["curve"] for s in samples[launch]), launch
