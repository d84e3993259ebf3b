"""``notebook-accel config``: write a config file by answering questions, or for this machine with ``--default``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypedDict

from notebook_accel import hardware
from notebook_accel.cli.common import EXIT_OK, UsageError
from notebook_accel.cli.engine_questions import ask_engine
from notebook_accel.cli.questions import ask, ask_choice, ask_int
from notebook_accel.config import Config, default_config_path, save_config
from notebook_accel.config.choices import RdzvBackend
from notebook_accel.config.machine import config_for_machine, precision_choices
from notebook_accel.config.validation import parse_gpu_ids
from notebook_accel.hardware import GpuInfo

__all__ = ["register", "configure", "interview"]

_RDZV_BACKENDS: list[RdzvBackend] = ["static", "c10d"]


class _Machines(TypedDict, total=False):
    """The answers about other machines (each left out keeps the Config default)."""

    machine_rank: int
    main_process_ip: str
    main_process_port: int
    rdzv_backend: RdzvBackend


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``config`` subcommand."""
    parser = commands.add_parser(
        "config",
        help="write a config file (questions, or --default for this machine)",
        description="Write a config file by answering a few questions (press Enter to take the default in "
        "brackets), or with --default for this machine without asking. The file goes to --config_file, else "
        "$NOTEBOOK_ACCEL_CONFIG_FILE, else ~/.config/notebook_accel/config.yaml.",
    )
    parser.add_argument("--config_file", "--config-file", metavar="FILE", help="where to write the config")
    parser.add_argument("--default", action="store_true", help="write a config for this machine without asking: "
                        "one process per GPU, or one CPU process")
    parser.add_argument("--mixed_precision", "--mixed-precision", choices=["no", "fp16", "bf16", "fp8"], default="no",
                        help="with --default: the mixed precision mode (default no)")
    parser.add_argument("--force", action="store_true", help="with --default: replace an existing file")
    parser.set_defaults(run=configure)


def configure(args: argparse.Namespace) -> int:
    """Run the ``config`` subcommand."""
    path = Path(args.config_file).expanduser() if args.config_file else default_config_path()
    gpus = hardware.detect_gpus()
    if args.default:
        if path.exists() and not args.force:
            raise UsageError(f"a config already exists at {path}; pass --force to replace it, or --config_file to "
                             "write elsewhere")
        config = config_for_machine(gpus, args.mixed_precision)
    else:
        config = interview(gpus, hardware.cpu_count())
    save_config(config, path)
    devices = "CPU" if config.use_cpu else "GPU"
    engine = f", {config.distributed_type}" if config.distributed_type in ("FSDP", "DEEPSPEED") else ""
    print(f"Saved the config to {path} ({config.num_processes} process(es) on {devices}{engine}, mixed precision "
          f"{config.mixed_precision}).")
    return EXIT_OK


def _gpu_ids(text: str, count: int) -> str:
    """Check an answer to the GPU question against the detected count."""
    try:
        ids = parse_gpu_ids(text)
    except ValueError:
        raise ValueError(f"{text!r} is not 'all' or distinct indices such as 0,1") from None
    if ids is not None and max(ids) >= count:
        raise ValueError(f"GPU {max(ids)} does not exist; this machine has GPUs 0 to {count - 1}")
    return "all" if ids is None else ",".join(map(str, ids))


def interview(gpus: list[GpuInfo], cpus: int) -> Config:
    """Ask the questions on stdin and build the config (validated).

    Raises:
        UsageError: stdin ended early or an answer stayed wrong.
        ConfigError: the answers do not fit together.
    """
    use_cpu = True
    if gpus:
        print(f"Detected {len(gpus)} GPU(s): " + ", ".join(f"{g.index}: {g.name}" for g in gpus))
        use_cpu = ask_choice("Run on", ["gpu", "cpu"], "gpu") == "cpu"
    else:
        print(f"No GPU detected: the config runs on CPU ({cpus} cores).")
    machines = ask_int("How many machines", 1, 1)
    multi: _Machines = {}
    if machines > 1:
        multi["machine_rank"] = ask_int("Rank of this machine (0 is the main machine)", 0, 0, machines - 1)
        multi["main_process_ip"] = ask("IP address or host name of the main machine", None, str)
        multi["main_process_port"] = ask_int("Port on the main machine", 29500, 1, 65535)
        multi["rdzv_backend"] = ask_choice("Rendezvous backend", _RDZV_BACKENDS, "static")
    else:
        multi["main_process_port"] = ask_int("Port (0 picks a free one for each run)", 0, 0, 65535)
    gpu_ids = None
    per_machine_limit = None
    if not use_cpu:
        gpu_ids = ask("Which GPUs ('all' or indices such as 0,1)", "all", lambda t: _gpu_ids(t, len(gpus)))
        ids = parse_gpu_ids(gpu_ids)
        per_machine_limit = len(gpus) if ids is None else len(ids)
    per_machine = ask_int("Processes on each machine", per_machine_limit or 1, 1, per_machine_limit)
    choices = precision_choices([] if use_cpu else gpus)
    mixed = ask_choice("Mixed precision", choices, "no")
    steps = ask_int("Gradient accumulation steps", 1, 1)
    engine, sections = ask_engine() if per_machine * machines > 1 else (None, {})
    return Config(num_processes=per_machine * machines, num_machines=machines, use_cpu=use_cpu, gpu_ids=gpu_ids,
                  mixed_precision=mixed, gradient_accumulation_steps=steps, distributed_type=engine, extra=sections,
                  **multi)
