"""accelerate's own distributed test scripts pass here with only their import lines changed.

Each script is read from the installed accelerate, its imports are pointed at notebook_accel (into a temporary
folder), and it is run on 2 CPU processes through ``notebook-accel launch`` (test_notebook through our
``notebook_launcher``), every check it calls recorded separately (see ``script_driver.py``).

Every call that passes under accelerate (:data:`PASSING_UNDER_ACCELERATE`, measured with
``python -m tests.compat.accelerate_scripts accelerate``) must pass here, or be named, with its reason, in the
migration guide's "different on purpose" or "not provided" row as ``script.py::call``. The test expects exactly that
list: a new failure fails it, and so does a listed call that now passes (take it out of the migration guide).
``script.py::import`` in the migration guide stands for every call of a script that cannot be imported here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.compat.accelerate_scripts import SCRIPTS, Script, run_script, scripts_dir

# the API table of the migration guide (docs/guides/migrating.md; it was the README's)
README = Path(__file__).resolve().parents[2] / "docs" / "guides" / "migrating.md"

# The calls that pass under accelerate 1.16.0 (constraints.txt pins it) on 2 CPU processes (torchrun,
# ACCELERATE_USE_CPU), 64 in all; `python3 dev.py compat-latest` measures them again under the newest release.
# Not here: calls that fail or hang under accelerate on CPU (its join_uneven_inputs is a no-op outside multi-GPU;
# test_fault_tolerant, which hangs there), and test_metrics' GPU-only calls.
PASSING_UNDER_ACCELERATE: dict[str, tuple[str, ...]] = {
    "test_script.py": (
        "init_state_check()",
        "process_execution_check()",
        "test_split_between_processes_list()",
        "test_split_between_processes_tuple()",
        "test_split_between_processes_nested_dict()",
        "test_split_between_processes_tensor()",
        "test_split_between_processes_evenly()",
        "test_split_between_processes_dataset(datasets_Dataset)",
        "rng_sync_check()",
        "dl_preparation_check()",
        "central_dl_preparation_check()",
        "custom_sampler_check()",
        "check_seedable_sampler()",
        "check_seedable_sampler_with_data_seed()",
        "check_seedable_sampler_in_batch_sampler_shard()",
        "training_check(use_seedable_sampler=False)",
        "training_check(use_seedable_sampler=True)",
        "test_trigger()",
        "test_reinstantiated_state()",
        "main",
    ),
    "test_sync.py": (
        "test_dataloader_break()",
        "test_distributed_sync(accelerator)",
        "test_distributed_sync_multiple_fwd(accelerator)",
        "test_gradient_accumulation_with_opt_and_scheduler()",
        "main",
    ),
    "test_ops.py": (
        "test_gather(state)",
        "test_gather_object(state)",
        "test_gather_non_contiguous(state)",
        "test_broadcast(state)",
        "test_pad_across_processes(state)",
        "test_reduce_sum(state)",
        "test_reduce_mean(state)",
        "test_reduce_max(state)",
        "test_op_checker(state)",
        "test_copy_tensor_to_devices(state)",
        "main",
    ),
    "test_distributed_data_loop.py": (
        "create_accelerator()",
        "test_skip_first_batches_preserves_metric_samples(accelerator)",
        "test_default_ensures_even_batch_sizes()",
        "test_can_disable_even_batches()",
        "test_join_raises_warning_for_non_ddp_distributed(accelerator)",
        "test_pickle_accelerator()",
        "test_data_loader(data_loader, accelerator)",
        "test_data_loader(data_loader, accelerator)#2",
        "test_data_loader(data_loader, accelerator)#3",
        "test_data_loader(data_loader, accelerator)#4",
        "test_stateful_dataloader(accelerator)",
        "test_stateful_dataloader_save_state(accelerator)",
        "main",
    ),
    "test_notebook.py": (
        "test_can_initialize()",
        "test_clean_cuda_fork()",
        "test_mixed_precision()",
        "test_static_rdzv_backend()",
        "test_c10d_rdzv_backend()",
        "test_monitoring()",
        "main",
    ),
    "test_cli.py": ("main",),
    "external_deps/test_metrics.py": (
        "test_torch_metrics(accelerator, num_samples=99)",
        "test_torch_metrics(accelerator, num_samples=99)#2",
        "test_torch_metrics(accelerator, num_samples=99)#3",
        "test_torch_metrics(accelerator, num_samples=99)#4",
        "test_torch_metrics(accelerator, num_samples=512)",
        "test_gather_for_metrics_drop_last()",
        "main",
    ),
}

# What a script or a call needs beyond the test extra's core (the test extra installs them; without them the
# script is skipped or the call is not counted, under accelerate too).
NEEDS: dict[str, tuple[str, ...]] = {
    "external_deps/test_metrics.py": ("datasets", "evaluate", "transformers"),
    "test_script.py::test_split_between_processes_dataset(datasets_Dataset)": ("datasets",),
    # use_stateful_dataloader=True: accelerate's loaders are torchdata's StatefulDataLoader
    "test_distributed_data_loop.py::test_stateful_dataloader(accelerator)": ("torchdata",),
    "test_distributed_data_loop.py::test_stateful_dataloader_save_state(accelerator)": ("torchdata",),
}


def missing(key: str) -> list[str]:
    """The packages ``key`` (a script or ``script::call``) needs that cannot be imported here."""
    return [m for m in NEEDS.get(key, ()) if importlib.util.find_spec(m) is None]


def counted(script: str) -> tuple[str, ...]:
    """The calls of ``script`` that pass under accelerate and can run here."""
    return tuple(c for c in PASSING_UNDER_ACCELERATE[script] if not missing(f"{script}::{c}"))

_CALL = re.compile(r"`([\w/]+\.py::[^`]+)`")


def explained_in_readme() -> set[str]:
    """Every ``script.py::call`` the migration guide's "different on purpose" and "not provided" rows name."""
    rows = [line for line in README.read_text().splitlines()
            if line.startswith(("| **different on purpose** |", "| **not provided, and why** |"))]
    assert len(rows) == 2, "the migration guide's API table lost its 'different on purpose' or 'not provided' row"
    return {m for row in rows for m in _CALL.findall(row)}


def expected_failures(script: str, explained: set[str]) -> set[str]:
    """The calls of ``script`` the migration guide explains (all of them when it explains the script's import)."""
    calls = counted(script)
    if f"{script}::import" in explained:
        return set(calls)
    return {c for c in calls if f"{script}::{c}" in explained}


def test_the_readme_names_only_calls_that_exist() -> None:
    known = {f"{s}::{c}" for s, calls in PASSING_UNDER_ACCELERATE.items() for c in (*calls, "import")}
    unknown = sorted(explained_in_readme() - known)
    assert not unknown, f"the migration guide names unknown calls: {unknown}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.path in PASSING_UNDER_ACCELERATE], ids=lambda s: s.path)
def test_accelerate_script_passes_with_only_the_imports_changed(script: Script, tmp_path: Path) -> None:
    if scripts_dir() is None:
        pytest.skip("accelerate is not installed (the test extra has it): its test scripts cannot be read")
    if missing(script.path):
        pytest.skip(f"{script.path} imports {missing(script.path)}, not installed (the test extra has them)")
    outcomes, output = run_script(script, "notebook_accel", tmp_path)
    failing = {c: outcomes.get(c, outcomes.get("import", "not reached")) for c in counted(script.path)
               if outcomes.get(c) != "ok"}
    expected = expected_failures(script.path, explained_in_readme())
    new = {c: why for c, why in failing.items() if c not in expected}
    fixed = sorted(expected - set(failing))
    assert not new and not fixed, (
        f"{script.path}: calls that pass under accelerate and now fail here (fix them, or explain them in the "
        f"migration guide): {new}\ncalls the migration guide explains that now pass (take them out of the migration "
        f"guide): {fixed}\n"
        f"--- output (last 3000 characters) ---\n{output[-3000:]}"
    )
