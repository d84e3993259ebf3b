"""The product's central promise, end to end: an accelerate-style training script runs after changing only its
import lines, started three ways.

(a) ``notebook_launcher(training_function, num_processes=2)`` from this (kernel-like) process, (b)
``python -m notebook_accel.cli launch --num_processes 2 script.py`` (torchrun underneath), and (c) plain
``python script.py`` (one process). Each run is done once and shared between the tests that read it, so the
folder stays fast; a test run alone (``-k``) starts the runs it needs itself.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from notebook_accel import environment, hardware, notebook_launcher
from tests.integration import accelerate_style
from tests.integration.accelerate_style import parse_args, training_function

pytestmark = pytest.mark.timeout(180)

SCRIPT = Path(accelerate_style.__file__)
REPO_ROOT = SCRIPT.parents[2]
Mode = Literal["launcher", "cli", "python"]
_RESULTS: dict[Mode, dict[str, Any]] = {}


# -- running the script ------------------------------------------------------------------------------------------
def _script_argv(work: Path, explicit: bool = True) -> list[str]:
    """The script's own arguments for a run in ``work``; ``explicit``: the script passes
    ``mixed_precision="no", gradient_accumulation_steps=2`` to its Accelerator, else neither (the launch decides)."""
    argv = ["--output", str(work / "result.json"), "--project_dir", str(work)]
    return argv + (["--mixed_precision", "no", "--gradient_accumulation_steps", "2"] if explicit else [])


def _run_subprocess(cmd: list[str], work: Path, threads: int | None = None) -> dict[str, Any]:
    """Run ``cmd`` (with ``OMP_NUM_THREADS=threads`` when given; the timeout is a hang guard, not a timing),
    fail with its output if it fails, return the result file."""
    env = environment.environ_with({} if threads is None else {environment.OMP_NUM_THREADS: str(threads)})
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=150)
    output = f"$ {' '.join(cmd)}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{output}"
    # the ranks share one stdout: accelerator.print must have printed on the main process only
    assert proc.stdout.count("epoch 1: loss") == 1, f"expected one 'epoch 1' line\n{output}"
    return json.loads((work / "result.json").read_text())


def _run(mode: Mode, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The result of the run started through ``mode`` (run once per session, then cached)."""
    if mode in _RESULTS:
        return _RESULTS[mode]
    work = tmp_path_factory.mktemp(f"run-{mode}")
    argv = _script_argv(work)
    if mode == "launcher":
        returned = notebook_launcher(training_function, args=(parse_args(argv),), num_processes=2, dashboard=False)
        written = json.loads((work / "result.json").read_text())
        assert returned == written, "rank 0's return value differs from what rank 0 wrote"
        result = written
    elif mode == "cli":
        result = _run_subprocess([sys.executable, "-m", "notebook_accel.cli", "launch", "--num_processes", "2",
                                  "--main_process_port", "0", str(SCRIPT), *argv], work,
                                 threads=max(1, hardware.cpu_count() // 2))  # what notebook_launcher gives each
    else:
        result = _run_subprocess([sys.executable, str(SCRIPT), *argv], work)
    _check_run(result, work)
    _RESULTS[mode] = result
    return result


def _check_run(result: dict[str, Any], work: Path) -> None:
    """What every finished run must show, whatever started it."""
    assert result["eval_items"] == accelerate_style.EVAL_SIZE  # padding duplicates dropped, nothing lost
    # main_process_first: the main process built the data cache before the others looked for it
    assert result["cache_built_by_rank"] == [True] + [False] * (result["world_size"] - 1)
    assert result["checkpoint_restored"], "load_state did not bring back the parameters saved after epoch 0"
    assert result["exported"] == ["model.safetensors"]
    assert (work / "final_state_dict.pt").is_file()
    assert result["final_lr"] == pytest.approx(0.0)  # the schedule ran to its end: stepped with the real steps
    lines = (work / "logs" / "mlp" / "metrics.jsonl").read_text().splitlines()
    steps = accelerate_style.TRAIN_SIZE // accelerate_style.BATCH_SIZE + 1
    per_epoch = -(-steps // result["world_size"])
    # one line per training batch plus one eval line per epoch, written by the main process only
    assert len(lines) == 2 * (per_epoch + 1), lines[:3]


# -- the three launch modes --------------------------------------------------------------------------------------
def test_notebook_launcher_two_processes(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = _run("launcher", tmp_path_factory)
    assert result["world_size"] == 2
    assert result["distributed_type"].endswith("MULTI_CPU")
    assert result["batches_per_epoch"] == 7  # 13 batches sharded over 2 ranks, the tail padded to 14
    assert result["optimizer_steps"] == 8  # 4 per epoch: accumulation 2, the odd last batch flushes
    assert result["scheduler_steps"] == 16  # as accelerate: num_processes scheduler steps per optimizer step


def test_cli_launch_two_processes(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = _run("cli", tmp_path_factory)
    assert result["world_size"] == 2
    assert result["distributed_type"].endswith("MULTI_CPU")
    assert (result["optimizer_steps"], result["scheduler_steps"]) == (8, 16)


def test_plain_python_one_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = _run("python", tmp_path_factory)
    assert result["world_size"] == 1
    assert result["distributed_type"].endswith("NO")
    assert result["batches_per_epoch"] == 13
    assert result["optimizer_steps"] == 14
    assert result["scheduler_steps"] == 14


def test_launcher_and_cli_give_the_same_parameters(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Same seeds, same data order, same world size and thread count per worker -> the same float operations in
    the same order, so the parameters agree bit for bit (gloo's two-rank all-reduce is deterministic). The
    allclose comes first so that a failure shows whether the runs diverged or only differ in rounding."""
    launched, cli = _run("launcher", tmp_path_factory), _run("cli", tmp_path_factory)
    assert launched["parameters"] == pytest.approx(cli["parameters"], rel=1e-6, abs=1e-7)
    assert launched["checksum"] == cli["checksum"]
    assert launched["final_loss"] == cli["final_loss"]
    assert launched["eval_accuracy"] == cli["eval_accuracy"]


# -- the launch config reaches the workers' Accelerator ----------------------------------------------------------
def _write_config(folder: Path) -> Path:
    """A launch config asking for bf16, accumulation 2 and two processes."""
    config = folder / "config.yaml"
    config.write_text("mixed_precision: bf16\ngradient_accumulation_steps: 2\nnum_processes: 2\n")
    return config


def _check_config_run(result: dict[str, Any], work: Path) -> None:
    """A run whose Accelerator took precision and accumulation from the launch config."""
    assert result["world_size"] == 2
    assert result["mixed_precision"] == "bf16"
    assert result["gradient_accumulation_steps"] == 2
    assert (result["optimizer_steps"], result["scheduler_steps"]) == (8, 16)
    _check_run(result, work)


def test_launcher_config_reaches_the_accelerator(tmp_path: Path) -> None:
    config = _write_config(tmp_path)
    args = parse_args(_script_argv(tmp_path, explicit=False))
    result = notebook_launcher(training_function, args=(args,), config=str(config), dashboard=False)
    _check_config_run(result, tmp_path)


def test_cli_config_file_reaches_the_accelerator(tmp_path: Path) -> None:
    config = _write_config(tmp_path)
    result = _run_subprocess([sys.executable, "-m", "notebook_accel.cli", "launch", "--config_file", str(config),
                              "--main_process_port", "0", str(SCRIPT), *_script_argv(tmp_path, explicit=False)],
                             tmp_path)
    _check_config_run(result, tmp_path)


# -- the script stays accelerate code -----------------------------------------------------------------------------
_IMPORT_LINE = re.compile(r"^(from\s+accelerate(\.\w+)*\s+import\s|import\s+accelerate\b)")

# names and keywords that accelerate itself offers (see shared/ACCELERATE_API.md); the script may use no others
_ACCELERATE_IMPORTS = {
    "accelerate": {"Accelerator", "notebook_launcher", "PartialState", "DistributedType"},
    "accelerate.utils": {"set_seed", "DataLoaderConfiguration", "ProjectConfiguration", "GradientAccumulationPlugin",
                         "DistributedDataParallelKwargs", "GradScalerKwargs", "InitProcessGroupKwargs", "gather",
                         "gather_object", "broadcast", "reduce", "pad_across_processes", "send_to_device"},
}
_ACCELERATE_KEYWORDS = {
    "Accelerator": {"device_placement", "split_batches", "mixed_precision", "gradient_accumulation_steps", "cpu",
                    "dataloader_config", "rng_types", "log_with", "project_dir", "project_config",
                    "gradient_accumulation_plugin", "step_scheduler_with_optimizer", "kwargs_handlers"},
    "DataLoaderConfiguration": {"split_batches", "dispatch_batches", "even_batches", "use_seedable_sampler",
                                "data_seed", "non_blocking"},
    "ProjectConfiguration": {"project_dir", "logging_dir", "automatic_checkpoint_naming", "total_limit",
                             "iteration"},
}
_ACCELERATOR_MEMBERS = {
    "device", "distributed_type", "num_processes", "process_index", "local_process_index", "is_main_process",
    "is_local_main_process", "is_last_process", "use_distributed", "mixed_precision", "sync_gradients",
    "gradient_accumulation_steps", "optimizer_step_was_skipped", "project_dir", "logging_dir", "prepare",
    "backward", "accumulate", "no_sync", "autocast", "clip_grad_norm_", "clip_grad_value_", "unscale_gradients",
    "gather", "gather_for_metrics", "gather_object", "reduce", "pad_across_processes", "broadcast", "print",
    "wait_for_everyone", "main_process_first", "local_main_process_first", "on_main_process",
    "split_between_processes", "unwrap_model", "save_model", "save", "save_state", "load_state",
    "register_for_checkpointing", "free_memory", "skip_first_batches", "init_trackers", "log", "get_tracker",
    "end_training",
}


def _renamed_source() -> tuple[list[str], list[str]]:
    """The script's lines, before and after renaming the package to ``accelerate``."""
    original = SCRIPT.read_text().splitlines()
    return original, [line.replace("notebook_accel", "accelerate") for line in original]


def test_only_import_lines_name_the_package() -> None:
    original, renamed = _renamed_source()
    changed = [line for line in difflib.unified_diff(original, renamed, lineterm="", n=0)
               if line.startswith("+") and not line.startswith("+++")]
    assert changed, "the script does not import from notebook_accel at all"
    not_imports = [line[1:] for line in changed if not _IMPORT_LINE.match(line[1:])]
    assert not not_imports, f"lines other than imports name the package: {not_imports}"


def test_script_uses_only_accelerate_api() -> None:
    _, renamed = _renamed_source()
    tree = ast.parse("\n".join(renamed))
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "accelerate":
            allowed = _ACCELERATE_IMPORTS.get(node.module or "", set())
            problems += [f"from {node.module} import {a.name}" for a in node.names if a.name not in allowed]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ACCELERATE_KEYWORDS:
            allowed = _ACCELERATE_KEYWORDS[node.func.id]
            problems += [f"{node.func.id}({k.arg}=...)" for k in node.keywords if k.arg and k.arg not in allowed]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "accelerator" and node.attr not in _ACCELERATOR_MEMBERS):
            problems.append(f"accelerator.{node.attr}")
    assert not problems, f"the script uses names accelerate does not have: {problems}"


def test_api_guard_catches_a_foreign_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The guard above is real: a notebook-accel-only call in the script fails it."""
    bad = tmp_path / "bad.py"
    bad.write_text(SCRIPT.read_text() + "\naccelerator.dashboard_only_feature()\n")
    monkeypatch.setattr(sys.modules[__name__], "SCRIPT", bad)
    with pytest.raises(AssertionError, match="dashboard_only_feature"):
        test_script_uses_only_accelerate_api()
