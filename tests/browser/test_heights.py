"""Real-browser test: the cell's output holds its height from its first paint to the final result (JupyterLab).

A JupyterLab server serves one notebook per window width (1,000 px with the file browser open beside the
notebook, and 1,400 px with it closed), with five launches: a 3-epoch training run (curves from its first
batches), a background run that logs curves and ends by itself, a sub-second launch that logs and prints nothing
(as tutorial 05's), a run that hangs in a collective until its timeout (the verdict), and the 3-epoch run again
(a function this kernel has run before). Headless Chromium runs all cells and samples every launch cell's first
output (the dashboard, then its result) about 10 times a second. The goal, for each launch: from the first
paint that has a height to the final result, the tallest sample is at most 1.10 times the shortest. Whichever
size the dashboard chose (compact or full; on a loaded machine a "sub-second" launch may run long), it must not
jump. An output painted empty (a function not run before, until its size is known) has no height and is not a
paint.

The heights are printed (``pytest -s``); screenshots go to ``build/browser/heights-<width>-*.png`` (at 1,000 px
one while the first run draws curves). Skips as test_jupyterlab.py does when jupyterlab, playwright or
``/usr/bin/chromium`` is missing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.lab_session import served_notebook
from tests.browser.test_fit import _open_side_panel
from tests.browser.test_jupyterlab import SHOTS, _hide_left_panel, _open, _run_all

pytestmark = pytest.mark.timeout(420)

SETUP = '''\
import time
from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.launcher import LaunchTimeoutError

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

def hang():
    import torch
    accelerator = Accelerator()
    time.sleep(0 if accelerator.is_main_process else 60)  # rank 1 sleeps while rank 0 waits for it
    accelerator.reduce(torch.ones(1))
'''
CELLS = {
    "multi-epoch": 'steps = notebook_launcher(train, args=(0.12,), num_processes=2)',
    "background": 'run = notebook_launcher(slow, args=(50,), num_processes=2, block=False)',
    "wait": 'run.result()',
    "sub-second": 'notebook_launcher(report, num_processes=2)',
    "hang": 'try:\n    notebook_launcher(hang, num_processes=2, timeout=8)\nexcept LaunchTimeoutError:\n    print("stopped")',
    "again": 'steps = notebook_launcher(train, args=(0.12,), num_processes=2)',
}
LAUNCHES = {"multi-epoch": 1, "background": 2, "sub-second": 4, "hang": 5, "again": 6}  # code cell of each launch
DONE = {"multi-epoch": "train: finished in", "background": "slow: finished in", "sub-second": "report: finished in",
        "hang": "hang: timeout in", "again": "train: finished in"}

# Each launch cell's first output: its height, whether a curve is drawn, the first 80 characters of its text.
SAMPLE_JS = """(cells) => cells.map(i => {
  const cell = document.querySelectorAll('.jp-CodeCell')[i];
  const out = cell && cell.querySelector('.jp-OutputArea-child');
  if (!out) return null;
  return {t: performance.now() / 1000, h: out.getBoundingClientRect().height,
          curve: !!out.querySelector('svg polyline, img[alt="training curves"]'), text: out.innerText.slice(0, 300)};
})"""


def _sample(page: Any, width: int) -> dict[str, list[dict[str, Any]]]:
    """Sample every launch cell until each one's result shows; return the samples of each, keyed by launch (an
    output with no height yet is counted, not kept). At 1,000 px, one screenshot while the first run draws."""
    samples: dict[str, list[dict[str, Any]]] = {n: [] for n in LAUNCHES}
    empty = dict.fromkeys(LAUNCHES, 0)
    deadline, shot = time.monotonic() + 300, width != 1000
    while time.monotonic() < deadline:
        raw = page.evaluate(SAMPLE_JS, list(LAUNCHES.values()))
        for launch, one in zip(LAUNCHES, raw):
            if one is not None and one["h"] > 0:
                samples[launch].append(one)
            elif one is not None:
                empty[launch] += 1
        if not shot and samples["multi-epoch"] and samples["multi-epoch"][-1]["curve"]:
            page.screenshot(path=str(SHOTS / f"heights-{width}-live.png"))
            shot = True
        if all(s and DONE[n] in s[-1]["text"] for n, s in samples.items()):
            break
        time.sleep(0.1)
    time.sleep(1.0)  # the result settles (its image decoded)
    for launch, one in zip(LAUNCHES, page.evaluate(SAMPLE_JS, list(LAUNCHES.values()))):
        samples[launch].append(one)
    page.screenshot(path=str(SHOTS / f"heights-{width}-final.png"), full_page=True)
    print(f"\n[{width}px] samples of an output with no height yet (an empty first paint): {empty}")
    return samples


def _report(width: int, launch: str, samples: list[dict[str, Any]]) -> list[float]:
    """Print the heights (each change with its time after the first paint, the first curve marked ``*``); return
    them, from the first paint to the final result."""
    heights = [s["h"] for s in samples]
    t0, steps, last = samples[0]["t"], [], -1.0
    curve_seen = False
    for s in samples:
        mark = "*" if s["curve"] and not curve_seen else ""
        curve_seen = curve_seen or s["curve"]
        if abs(s["h"] - last) >= 1 or mark:
            steps.append(f"{s['h']:.0f}px{mark}@{s['t'] - t0:.1f}s")
            last = s["h"]
    print(f"[{width}px] {launch}: first paint {heights[0]:.0f}px, final result {heights[-1]:.0f}px, max/min "
          f"{max(heights) / min(heights):.2f}; heights {' -> '.join(steps)} (* first curve)")
    return heights


@pytest.mark.parametrize("width", [1000, 1400])
def test_the_output_holds_its_height_from_the_first_paint_to_the_result(width: int) -> None:
    with served_notebook((SETUP, *CELLS.values()), width, 2600) as (browser, base):
        page = browser.new_page()
        _open(page, base, "lab/tree/run.ipynb")
        time.sleep(1.0)
        if width == 1000:
            _open_side_panel(page, "jupyterlab")  # the file browser beside the notebook: a ~570 px output
        else:
            _hide_left_panel(page)
        _run_all(page)
        samples = _sample(page, width)
    for launch, seen in samples.items():
        assert seen and DONE[launch] in seen[-1]["text"], (launch, seen[-1:] if seen else "never shown")
    heights = {launch: _report(width, launch, seen) for launch, seen in samples.items()}
    jumps = {launch: f"{min(h):.0f}-{max(h):.0f}px" for launch, h in heights.items() if max(h) > 1.10 * min(h)}
    assert not jumps, f"outputs whose height changed by more than 10% from the first paint: {jumps}"
    for launch in ("multi-epoch", "background", "again"):
        assert any(s["curve"] for s in samples[launch]), launch
