"""Every code example of the documentation runs.

The guides take their examples from docs/examples/ (``--8<--`` snippets, so the page shows the very lines that run
here); this test runs each of those scripts, checks that the README's example is the quickstart script's, and that a
guide's Python block is either taken from a script or named in :data:`NOT_RUN` with the reason it cannot run here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"

# (page, first line of the block) -> why it is shown but not run by the suite (each is covered by the named tests)
NOT_RUN: dict[tuple[str, str], str] = {
    ("guides/ray.md", "result = notebook_launcher(train, args=(config,), num_processes=16, cluster=\"ray\")   # the "
     "cluster this kernel joined"): "needs a Ray cluster of 16 workers (tests/launcher/ray runs two real nodes)",
    ("guides/checkpoints-background.md", "from notebook_accel import Accelerator, ProjectConfiguration"):
        "a fragment (the loader and the loop's body are the reader's; tests/checkpointing/"
        "test_background_multiprocess.py saves in the background under DDP and FSDP)",
    ("guides/slurm.md", "from notebook_accel import notebook_launcher"):
        "needs a Slurm allocation (tests/launcher/slurm runs a real two-node Slurm)",
    ("guides/slurm.md", "from notebook_accel import SlurmCluster, notebook_launcher"):
        "needs a Slurm login node with a gpu partition (tests/launcher/slurm/test_login.py asks the real two-node "
        "test Slurm for allocations)",
    ("guides/several-notebooks.md", "# on every machine; node 0's address on the network that joins them, and a "
     "port free on node 0"): "needs two machines (tests/distributed/test_multinode.py makes two hosts)",
    ("guides/sharded-training.md", "from notebook_accel import Accelerator, DeepSpeedPlugin"):
        "a fragment inside a training function (tests/engines/deepspeed trains with these plugins)",
    ("guides/trainer.md", "from transformers import Trainer, TrainingArguments"):
        "build_model/build_dataset are the reader's (tests/integrations trains a Trainer under the launcher)",
}

NEEDS = {"fp8_emulated.py": "torchao"}


def _scripts() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.name)
def test_the_example_runs(script: Path) -> None:
    needed = NEEDS.get(script.name)
    if needed and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{needed} is not installed (python3 dev.py test installs it)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and re.search(r"^ok\b", done.stdout, re.M), output[-4000:]


def _section(script: Path, name: str) -> str:
    text = script.read_text()
    body = text.split(f"# --8<-- [start:{name}]\n", 1)[1].split(f"# --8<-- [end:{name}]", 1)[0]
    return textwrap.dedent(body).strip()


def test_the_readme_shows_the_quickstart_scripts_example() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block, "the README's quick example"
    expected = "from notebook_accel import Accelerator, notebook_launcher\n\n" + _section(
        EXAMPLES / "quickstart.py", "example")
    assert block.group(1).strip() == expected


def test_every_python_block_of_the_guides_runs_or_says_why_not() -> None:
    unexplained = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        name = page.relative_to(ROOT / "docs").as_posix()
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            lines = [line for line in block.splitlines() if line.strip()]
            if any(line.startswith("--8<--") for line in lines):
                for snippet in re.findall(r'--8<-- "([^":]+)', block):
                    assert (ROOT / snippet).exists() and snippet.startswith("docs/examples/"), snippet
                continue
            if (name, lines[0]) not in NOT_RUN:
                unexplained.append((name, lines[0]))
    assert unexplained == [], "take these from a script in docs/examples/ (or say in NOT_RUN why not)"
