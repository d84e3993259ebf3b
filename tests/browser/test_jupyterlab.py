"""Real-browser test: JupyterLab in headless Chromium (Debian's, driven by Playwright) runs a launch notebook.

A JupyterLab server is started on a free port in a temporary folder holding a short notebook: a 2-process
training run that logs metrics from a prepared DataLoader, then a run that fails on rank 1. Chromium opens it,
runs all cells, screenshots the live dashboard and the final cells (``build/browser/*.png``), and fails on any
widget error ("Error displaying widget", "model not found") or browser console error. The notebook is then
saved, the page closed, the kernel shut down, and the saved notebook reopened in a fresh page: it must show
the static results (curves image, summary, error once) and no widget view or raw ``VBox(children=...`` text.

Skips, with the reason, when jupyterlab or playwright is not installed or ``/usr/bin/chromium`` is missing
(``python3 dev.py test`` installs them; see the README). No browser is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "build" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if importlib.util.find_spec("playwright") is None or importlib.util.find_spec("jupyterlab") is None:
    pytest.skip("playwright and jupyterlab are needed (python3 dev.py test installs them)", allow_module_level=True)
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; dev.py does it when root)", allow_module_level=True)

pytestmark = pytest.mark.timeout(240)

TRAIN = '''\
import os, time, torch
from notebook_accel import Accelerator, notebook_launcher

def train(pause):
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step = 0
    for epoch in range(3):
        model.train()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            accelerator.log({"train/loss": loss.item()}, step=step)
            step += 1
            time.sleep(pause)
        accelerator.print(f"epoch {epoch + 1} done")
    return step

result = notebook_launcher(train, args=(0.15,), num_processes=2)
print("steps:", result)
'''

FAIL = '''\
def broken():
    import os, time
    if os.environ["RANK"] == "1":
        raise ValueError("boom on purpose")
    time.sleep(5)

notebook_launcher(broken, num_processes=2)
'''


def _notebook(path: Path) -> None:
    """Write the two-cell notebook."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(TRAIN), nbformat.v4.new_code_cell(FAIL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _start_lab(folder: Path, port: int) -> subprocess.Popen[bytes]:
    """JupyterLab on 127.0.0.1:``port`` without a token, its log in build/browser/lab.log."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(folder / ".jupyter"),
           "JUPYTER_DATA_DIR": str(folder / ".jupyter-data"), "JUPYTER_RUNTIME_DIR": str(folder / ".runtime")}
    log = open(SHOTS / "lab.log", "wb")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.root_dir={folder}", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
           "--allow-root"]
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}; see {SHOTS / 'lab.log'}") from None
            time.sleep(0.5)
    _stop(proc)
    raise RuntimeError(f"jupyter lab did not answer within 60 s; see {SHOTS / 'lab.log'}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and its kernels (its whole session)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # kernels left in the session
    except ProcessLookupError:
        pass


def _open(page: Any, url: str) -> None:
    """Open the notebook; accept the kernel dialog JupyterLab sometimes shows; wait for an idle kernel."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True)
    try:
        select.click(timeout=4_000)
    except Exception:  # noqa: BLE001 - no dialog this time
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)


def _cell_text(page: Any, index: int) -> str:
    """The text of the outputs of code cell ``index``."""
    return str(page.locator(".jp-CodeCell").nth(index).locator(".jp-OutputArea").inner_text())


def test_jupyterlab_shows_a_live_dashboard_and_a_clean_saved_result() -> None:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="nacc-lab-"))
    profile = Path(tempfile.mkdtemp(prefix="nacc-chromium-"))  # a fresh --user-data-dir, outside the served folder
    _notebook(folder / "run.ipynb")
    port = free_port()
    lab = _start_lab(folder, port)
    problems: list[str] = []
    try:
        with sync_playwright() as p:
            # a fresh profile (--user-data-dir) for every run: Playwright passes it from user_data_dir
            browser = p.chromium.launch_persistent_context(
                str(profile), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                viewport={"width": 1300, "height": 1800})
            try:
                page = browser.new_page()
                page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                _open(page, f"http://127.0.0.1:{port}/lab/tree/run.ipynb")
                page.get_by_role("menuitem", name="Run", exact=True).click()
                page.get_by_text("Run All Cells", exact=True).click()
                first = page.locator(".jp-CodeCell").nth(0)
                try:
                    first.locator(".widget-html svg polyline").first.wait_for(timeout=60_000)  # live curves drawn
                except Exception:
                    page.screenshot(path=str(SHOTS / "failure.png"), full_page=True)
                    raise
                time.sleep(0.7)
                first.screenshot(path=str(SHOTS / "live.png"))
                first.get_by_text("train: finished").wait_for(timeout=90_000)
                page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea-output").get_by_text(
                    "broken: failed").wait_for(timeout=90_000)
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
                first.screenshot(path=str(SHOTS / "final.png"))
                page.locator(".jp-CodeCell").nth(1).screenshot(path=str(SHOTS / "failed.png"))
                live_text = _cell_text(page, 0) + _cell_text(page, 1)
                assert first.locator(".jp-OutputArea img").count() == 1, "the final curves image is missing"
                assert first.locator(".widget-html").count() == 0, "the live widget view was not replaced"
                failed = _cell_text(page, 1)
                failed_result = str(page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea-output").first.inner_text())
                page.keyboard.press("Control+s")
                time.sleep(1.5)
                page.close()
                urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/kernels", method="GET"), timeout=5)
                for kernel in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/kernels", timeout=5)):
                    urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{port}/api/kernels/{kernel['id']}", method="DELETE"), timeout=10)
                again = browser.new_page()
                again.on("console", lambda m: problems.append(f"reopened console {m.type}: {m.text}")
                         if m.type == "error" else None)
                _open(again, f"http://127.0.0.1:{port}/lab/tree/run.ipynb")
                again.locator(".jp-CodeCell").nth(0).get_by_text("train: finished").wait_for(timeout=60_000)
                time.sleep(1.0)
                again.screenshot(path=str(SHOTS / "reopened.png"), full_page=True)
                reopened = _cell_text(again, 0) + _cell_text(again, 1)
                images = again.locator(".jp-CodeCell").nth(0).locator(".jp-OutputArea img").count()
            finally:
                browser.close()
    finally:
        _stop(lab)
    saved = json.loads((folder / "run.ipynb").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(profile, ignore_errors=True)
    for text in (live_text, reopened):
        assert "Error displaying widget" not in text and "model not found" not in text, text[-2000:]
        assert "VBox(children" not in text, text[-2000:]
    # the static result names the error once; the exception raised in the cell (below it) carries the traceback
    assert "broken: failed" in failed_result and failed_result.count("boom on purpose") == 1, failed_result
    assert "WorkerError" in failed
    assert images == 1, "the reopened notebook does not show the curves image"
    assert "train: finished" in reopened and "steps: 48" in reopened
    outputs = [o for c in saved["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not problems, "\n".join(problems)
