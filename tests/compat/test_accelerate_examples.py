"""accelerate's example scripts give the same training here as under accelerate, bit for bit.

Each script of accelerate's ``examples/`` (read from a checkout, see :mod:`tests.compat.accelerate_examples`)
runs offline on 2 CPU processes with a tiny random model, a synthetic data set and a local metric: once under
accelerate (``torchrun`` with ``ACCELERATE_USE_CPU``; cached per accelerate version and script), then with only
its imports rewritten, through ``notebook-accel launch`` and through ``notebook_launcher`` in a Jupyter kernel.
Every rank must record the same lines under notebook_accel as under accelerate: the same rows in each batch, the
same loss and logits at every forward, the same metric results.

A script that fails on CPU under accelerate too (``not_run`` in :data:`~tests.compat.accelerate_examples.EXAMPLES`)
and one that trains differently on purpose (:data:`DIFFERENT_ON_PURPOSE`: it must finish, and still differ) are each
named in docs/development.md with the reason. Skipped, saying how to get them, where the examples are absent (they
are not in accelerate's wheel). The accelerate runs are cached, so only the first session pays for them (see
docs/development.md for the measured cost).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.accelerate_examples import (
    EXAMPLES,
    HOW_TO_GET,
    Example,
    Mode,
    baseline,
    difference,
    examples_source,
    extract,
    kernel_environment,
    run_example,
    run_in_kernel,
    verdict,
)

# the page that describes this test (docs/development.md, "Bumping accelerate"; it was docs/development.md's section)
README = Path(__file__).resolve().parents[2] / "docs" / "development.md"

# Scripts that finish here but train differently from accelerate, on purpose (the migration guide's "different on
# purpose"), with the reason. None today: a test fails as soon as one trains differently.
DIFFERENT_ON_PURPOSE: dict[str, str] = {}

pytestmark = pytest.mark.skipif(examples_source() is None, reason=HOW_TO_GET)
RUN = [e for e in EXAMPLES if not e.not_run]


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """accelerate's examples, extracted into a temporary folder."""
    source = examples_source()
    assert source is not None
    return extract(source, tmp_path_factory.mktemp("accelerate-examples"))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """One Jupyter kernel for every ``kernel``-mode run (a notebook that runs the examples one after another)."""
    from tests.kernel.test_launcher_kernel import running_kernel

    workdir = tmp_path_factory.mktemp("kernel-runs")
    with running_kernel(kernel_environment(workdir)) as (_, client):
        yield client, workdir


def test_every_script_left_out_is_named_in_the_readme_with_its_reason() -> None:
    text = README.read_text()
    left_out = [e.path for e in EXAMPLES if e.not_run] + list(DIFFERENT_ON_PURPOSE)
    assert [p for p in left_out if f"`{p}`" not in text] == [], "name each script left out in docs/development.md"


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("mode", ["cli", "kernel"])
@pytest.mark.parametrize("example", RUN, ids=lambda e: e.path)
def test_example_trains_the_same_as_under_accelerate(example: Example, mode: Mode, examples: Path,
                                                     kernel: tuple[Any, Path], tmp_path: Path) -> None:
    base, base_output = baseline(example, examples, tmp_path)
    assert verdict(base) == "ok", f"under accelerate: {verdict(base)}\n{base_output[-3000:]}"
    if mode == "cli":
        ours, output = run_example(example, examples, mode, tmp_path)
    else:
        client, workdir = kernel
        ours, output = run_in_kernel(client, example, examples, workdir)
    assert verdict(ours) == "ok", f"{example.path} through {mode}: {verdict(ours)}\n--- output ---\n{output[-3000:]}"
    problem = difference(base, ours)
    if example.path in DIFFERENT_ON_PURPOSE:
        assert problem, f"{example.path} now trains as under accelerate: take it out of DIFFERENT_ON_PURPOSE"
        return
    assert not problem, f"{example.path} through {mode}: {problem}\n--- output ---\n{output[-3000:]}"
