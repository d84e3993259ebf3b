"""accelerate's example scripts (``examples/``), run offline on 2 CPU processes under accelerate or notebook_accel.

The examples are not in accelerate's wheel or sdist, so they are read from a checkout of accelerate's repository:
``NOTEBOOK_ACCEL_ACCELERATE_EXAMPLES`` names its ``examples`` folder, the repository folder, or a (bare) git
directory (``git clone --bare https://github.com/huggingface/accelerate``); without it the check is off (it takes
several minutes per script, so it runs only when asked for). They are extracted into a temporary folder at run
time; nothing of accelerate's is copied into this repository. For notebook_accel only their import lines are rewritten
(:func:`tests.compat.accelerate_scripts.rewrite`).

Each script runs through ``example_driver.py`` with :mod:`offline_hub` (a tiny random BERT or Llama, a synthetic
MRPC or wikitext, a local GLUE metric), which records per rank every forward's rows, loss and logits and every
metric result. Three ways to run a script (:data:`Mode`):

- ``accelerate``: ``torchrun --nproc_per_node 2`` with ``ACCELERATE_USE_CPU`` (accelerate's multi-CPU launch);
- ``cli``: ``notebook-accel launch --num_processes 2``, the rewritten script;
- ``kernel``: in a Jupyter kernel, the rewritten script's ``main`` given to ``notebook_launcher(num_processes=2)``
  (see :func:`kernel_cell`).

Measure by hand (one line per script and mode, then the counts)::

    NOTEBOOK_ACCEL_ACCELERATE_EXAMPLES=~/accelerate.git .venv/bin/python -m tests.compat.accelerate_examples
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.compat.accelerate_scripts import WORLD_SIZE, launch_command, rewrite

Mode = Literal["accelerate", "cli", "kernel"]
MODES: tuple[Mode, ...] = ("accelerate", "cli", "kernel")
ENV_VAR = "NOTEBOOK_ACCEL_ACCELERATE_EXAMPLES"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOW_TO_GET = (f"accelerate's examples are not in its wheel: set {ENV_VAR} to a checkout of "
              "https://github.com/huggingface/accelerate (its folder, its examples/ folder or a bare git dir) "
              "of the installed accelerate's version")

Records = dict[int, list[dict[str, object]]]


@dataclass(frozen=True)
class Example:
    """One example script: its path under ``examples/``, its command line here, and why it is not run (if so)."""

    path: str
    args: tuple[str, ...] = ()
    not_run: str = ""
    timeout_s: float = 300.0


EXAMPLES: tuple[Example, ...] = (
    Example("nlp_example.py"),
    Example("complete_nlp_example.py", ("--checkpointing_steps", "epoch", "--output_dir", "out")),
    Example("by_feature/automatic_gradient_accumulation.py"),
    Example("by_feature/checkpointing.py", ("--checkpointing_steps", "epoch", "--output_dir", "out")),
    Example("by_feature/cross_validation.py", ("--num_folds", "2")),
    Example("by_feature/ddp_comm_hook.py", ("--ddp_comm_hook", "fp16")),
    Example("by_feature/deepspeed_with_config_support.py", (
        "--dataset_name", "wikitext", "--dataset_config_name", "wikitext-2-raw-v1", "--model_name_or_path", "tiny",
        "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--block_size", "32",
        "--num_train_epochs", "1", "--max_train_steps", "8", "--output_dir", "out", "--seed", "42")),
    Example("by_feature/early_stopping.py"),
    Example("by_feature/fsdp_with_peak_mem_tracking.py", ("--model_name_or_path", "bert-base-cased"),
            not_run="fails on CPU under accelerate too: its TorchTracemalloc measures CUDA/XPU/NPU memory only, and on "
                    "CPU its __exit__ reads self.end, never set (AttributeError)"),
    Example("by_feature/gradient_accumulation.py", ("--gradient_accumulation_steps", "2")),
    # 500 wikitext lines (the script's own max_training_samples), 3 epochs of batches of 2: about 370 steps per rank
    Example("by_feature/gradient_accumulation_for_autoregressive_models.py", ("--gradient_accumulation_steps", "2"),
            timeout_s=540.0),
    Example("by_feature/local_sgd.py", ("--local_sgd_steps", "2")),
    Example("by_feature/megatron_lm_gpt_pretraining.py",
            not_run="needs Megatron-LM and NVIDIA GPUs (accelerate's MegatronLMPlugin), under accelerate too"),
    Example("by_feature/memory.py"),
    Example("by_feature/multi_process_metrics.py"),
    Example("by_feature/profiler.py", ("--output_trace_dir", "traces")),
    Example("by_feature/schedule_free.py"),
    # not --with_tracking: it logs with "all", every tracker installed, and comet_ml (when installed) then wants an
    # API key under accelerate too
    Example("by_feature/tracking.py", ("--project_dir", "tracking")),
)


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def examples_source() -> Path | None:
    """Where accelerate's examples come from (``ENV_VAR``), or None when it is not set or names no examples."""
    given = os.environ.get(ENV_VAR)
    candidates = [Path(given).expanduser()] if given else []
    for path in candidates:
        if (path / "nlp_example.py").is_file() or (path / "examples" / "nlp_example.py").is_file():
            return path
        if _is_git_dir(path) or _is_git_dir(path / ".git"):
            return path
    return None


def extract(source: Path, dest: Path) -> Path:
    """Copy the examples of ``source`` (a folder or a git dir, its HEAD) into ``dest``; returns ``dest/examples``."""
    target = dest / "examples"
    if (source / "nlp_example.py").is_file():
        shutil.copytree(source, target)
    elif (source / "examples" / "nlp_example.py").is_file():
        shutil.copytree(source / "examples", target)
    else:
        git_dir = source if _is_git_dir(source) else source / ".git"
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "HEAD", "examples"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return target


def _environment(mode: Mode, workdir: Path) -> dict[str, str]:
    """CPU only, offline, trackers that write only local files, a scratch HOME for anything the scripts save."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "NOTEBOOK_ACCEL_"))}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", HF_HOME=str(workdir / "hf"),
               NOTEBOOK_ACCEL_LOG_DIR=str(workdir / "runs"), TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    if mode == "accelerate":
        env["ACCELERATE_USE_CPU"] = "true"  # else accelerate gives N independent runs on a CPU machine
    return env


def prepared(example: Example, examples: Path, mode: Mode) -> Path:
    """The script to run: accelerate's as shipped, or (notebook_accel) a copy with its imports rewritten."""
    path = examples / example.path
    if mode == "accelerate":
        return path
    ours = path.with_name(path.stem + "_notebook_accel.py")
    if not ours.exists():
        ours.write_text(rewrite(path.read_text()))
    return ours


def kernel_cell(script: Path, records: Path, args: tuple[str, ...]) -> str:
    """The notebook cell of ``kernel`` mode: load the script's functions, then ``notebook_launcher(main)``."""
    return "\n".join([
        "import os, runpy, sys",
        f"os.chdir({str(records.parent)!r})",
        f"sys.path.insert(0, {str(HERE)!r})",
        "import offline_hub",
        f"offline_hub.install({str(records)!r})",
        f"namespace = runpy.run_path({str(script)!r}, run_name='example')",
        f"sys.argv = [{str(script)!r}, *{list(args)!r}]",
        "from notebook_accel import notebook_launcher",
        f"notebook_launcher(offline_hub.recorded(namespace['main']), num_processes={WORLD_SIZE})",
    ])


def _command(mode: Mode, script: Path, records: Path, args: tuple[str, ...]) -> list[str]:
    driver = [str(HERE / "example_driver.py"), str(records), str(script), *args]
    return launch_command("accelerate" if mode == "accelerate" else "notebook_accel", driver)


def read_records(records: Path) -> Records:
    """Every rank's recorded lines."""
    return {rank: [json.loads(line) for line in (records / f"rank{rank}.jsonl").read_text().splitlines()]
            for rank in range(WORLD_SIZE) if (records / f"rank{rank}.jsonl").exists()}


def _records_folder(example: Example, mode: Mode, workdir: Path) -> Path:
    """A fresh ``records`` folder inside the run's own folder (the script's working directory)."""
    records = workdir / f"{example.path.replace('/', '__').removesuffix('.py')}-{mode}" / "records"
    records.mkdir(parents=True)
    return records


def run_example(example: Example, examples: Path, mode: Mode, workdir: Path) -> tuple[Records, str]:
    """Run ``example`` launched from a shell (``accelerate`` or ``cli``); returns its records and its output."""
    records = _records_folder(example, mode, workdir)
    folder = records.parent
    command = _command(mode, prepared(example, examples, mode), records, example.args)
    with subprocess.Popen(command, env=_environment(mode, folder), cwd=folder, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL) as process:
        try:
            output, _ = process.communicate(timeout=example.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            rest, _ = process.communicate()
            output = f"timed out after {example.timeout_s:.0f} s\n{rest}"
    return read_records(records), output


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process under it: torchrun starts its workers in sessions of their own, so a
    timed-out launch would otherwise leave them running."""
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=30)


def kernel_environment(workdir: Path) -> dict[str, str]:
    """The environment of the kernel that runs the ``kernel`` mode."""
    return _environment("kernel", workdir)


def run_in_kernel(client: Any, example: Example, examples: Path, workdir: Path) -> tuple[Records, str]:
    """Run ``example`` through ``notebook_launcher`` in the kernel of ``client``; returns its records and output."""
    from tests.kernel.test_launcher_kernel import execute

    records = _records_folder(example, "kernel", workdir)
    script = prepared(example, examples, "kernel")
    cell = execute(client, kernel_cell(script, records, example.args), timeout=example.timeout_s)
    return read_records(records), f"{cell.stdout}{cell.stderr}{cell.ename}: {cell.evalue}"


def verdict(records: Records) -> str:
    """``ok`` when every rank recorded the script's end, else what went wrong."""
    errors = [f"rank {r}: {e['error']}" for r, lines in records.items() for e in lines if e["kind"] == "error"]
    if errors:
        return errors[0]
    ended = [r for r, lines in records.items() if lines and lines[-1]["kind"] == "end"]
    if len(ended) < WORLD_SIZE:
        return f"did not finish on ranks {sorted(set(range(WORLD_SIZE)) - set(ended))}"
    return "ok"


def difference(base: Records, ours: Records) -> str:
    """The first recorded line where ``ours`` differs from ``base`` (same rank, same position), or ``""``."""
    for rank in range(WORLD_SIZE):
        a, b = base.get(rank, []), ours.get(rank, [])
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"rank {rank}, record {i}: accelerate {x} != notebook_accel {y}"
        if len(a) != len(b):
            return f"rank {rank}: accelerate recorded {len(a)} lines, notebook_accel {len(b)}"
    return ""


def cache_key(example: Example, examples: Path) -> str:
    """What the accelerate baseline depends on: the script, its args, the hub, the driver and the libraries."""
    import accelerate
    import torch
    import transformers

    h = hashlib.sha256()
    for path in (examples / example.path, HERE / "offline_hub.py", HERE / "example_driver.py"):
        h.update(path.read_bytes())
    h.update(repr((example.args, accelerate.__version__, torch.__version__, transformers.__version__)).encode())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where accelerate's baselines are kept between runs (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "notebook-accel-tests" / "accelerate-examples"


def baseline(example: Example, examples: Path, workdir: Path) -> tuple[Records, str]:
    """accelerate's records for ``example``: from the cache, else run once and cached when the run finished."""
    path = cache_dir() / f"{example.path.replace('/', '__')}-{cache_key(example, examples)}.json"
    if path.exists():
        return {int(k): v for k, v in json.loads(path.read_text()).items()}, "(cached)"
    records, output = run_example(example, examples, "accelerate", workdir)
    if verdict(records) == "ok":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records))
    return records, output


def _outcome(mode: Mode, base: Records, records: Records) -> str:
    """``ok``, the failure, or (notebook_accel) the first difference from accelerate's records."""
    outcome = verdict(records)
    if outcome == "ok" and mode != "accelerate":
        outcome = difference(base, records) or "ok"
    return outcome


def main(argv: list[str]) -> None:
    """Print every example's outcome in each mode (``ok``, ``differs: ...`` or the failure), then the counts."""
    from tests.kernel.test_launcher_kernel import running_kernel

    source = examples_source()
    if source is None:
        raise SystemExit(HOW_TO_GET)
    modes = [m for m in MODES if m in argv] or list(MODES)
    wanted = [a for a in argv if a not in MODES]
    chosen = [e for e in EXAMPLES if not wanted or any(w in e.path for w in wanted)]
    table: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="accelerate-examples-") as tmp, \
            running_kernel(kernel_environment(Path(tmp))) as (_, client):
        examples = extract(source, Path(tmp))
        for example in chosen:
            if example.not_run:
                print(f"{example.path}: not run -- {example.not_run}", flush=True)
                continue
            started = time.monotonic()
            base, base_output = baseline(example, examples, Path(tmp))
            for mode in modes:
                if mode != "accelerate":
                    started = time.monotonic()
                if mode == "accelerate":
                    records, output = base, base_output
                elif mode == "cli":
                    records, output = run_example(example, examples, mode, Path(tmp))
                else:
                    records, output = run_in_kernel(client, example, examples, Path(tmp))
                outcome = table.setdefault(example.path, {})[mode] = _outcome(mode, base, records)
                print(f"{example.path} [{mode}, {time.monotonic() - started:.0f} s]: {outcome}"
                      + ("" if outcome == "ok" else f"\n{output[-2000:]}"), flush=True)
    print("\n".join(f"{m}: {sum(row.get(m) == 'ok' for row in table.values())} of {len(chosen)} pass"
                    for m in modes))


if __name__ == "__main__":
    main(sys.argv[1:])
