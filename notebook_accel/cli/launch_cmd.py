"""``notebook-accel launch``: run a script on N processes through ``torch.distributed.run`` (torchrun).

On the machine that serves the rendezvous, torchrun runs inside :mod:`notebook_accel.cli.torchrun_bound`, so its
store listens on ``main_process_ip`` only.

The config (``--config_file`` or the default file) is read first and the flags override it. The config's
fields become torchrun's flags (``--nproc_per_node``, ``--nnodes``, ``--node_rank``, ``--master_addr``,
``--master_port``, or ``--rdzv_backend``/``--rdzv_endpoint`` for c10d and etcd); ``gpu_ids`` becomes
``CUDA_VISIBLE_DEVICES``; mixed precision, accumulation and ``use_cpu`` reach the script's ``Accelerator``
through the variables of :func:`notebook_accel.environment.launch_choices`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from notebook_accel import environment, hardware
from notebook_accel.cli.common import EXIT_FAILED, EXIT_OK, UsageError, active_config, error
from notebook_accel.cli.process import run_child
from notebook_accel.cli.cluster_launch import cluster_from_flags, launch_on_cluster
from notebook_accel.cluster.registry import add_cluster_flags
from notebook_accel.config import Config
from notebook_accel.config.fp8 import asks_for_emulation
from notebook_accel.engines.registry import launch_value
from notebook_accel.float8 import fp8_problems

__all__ = ["register", "torchrun_command", "child_environment", "launch"]

DEFAULT_PORT = 29500
_INT_FLAGS = ("num_processes", "gradient_accumulation_steps", "num_machines", "machine_rank", "main_process_port")


def _flag(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> None:
    """Add ``--name`` with its dashed alias ``--name-with-dashes`` (accelerate accepts both)."""
    names = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    parser.add_argument(*names, dest=name, **kwargs)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``launch`` subcommand."""
    parser = commands.add_parser(
        "launch",
        help="run a script on several processes (through torch.distributed.run)",
        description="Run SCRIPT on several processes through torch.distributed.run. Flags override the config "
        "file; options go before SCRIPT, everything after it is passed to the script.",
    )
    _flag(parser, "config_file", metavar="FILE", help="config file (default: the default config, if any)")
    for name in _INT_FLAGS:
        _flag(parser, name, type=int, metavar="N")
    _flag(parser, "mixed_precision", choices=["no", "fp16", "bf16", "fp8"])
    _flag(parser, "gpu_ids", metavar="IDS", help="'all' or GPU indices such as 0,1")
    _flag(parser, "main_process_ip", metavar="HOST")
    _flag(parser, "rdzv_backend", choices=["static", "c10d", "etcd", "etcd-v2"])
    parser.add_argument("--cpu", action="store_true", default=None, help="run on CPU even when GPUs are present")
    add_cluster_flags(_flag, parser)  # --cluster NAME and each placement's own flags (notebook_accel.cluster)
    _flag(parser, "dry_run", action="store_true", help="print the command and the variables, run nothing")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(run=launch)


def torchrun_command(config: Config, script: str, script_args: list[str], port: int | None = None) -> list[str]:
    """The torchrun command line for ``config``.

    The machine that serves the rendezvous (the only one of a one-machine run, machine 0 of a static
    several-machine run) runs torchrun through :mod:`notebook_accel.cli.torchrun_bound`, which serves the store on
    ``main_process_ip`` only (torchrun alone would listen on every interface); the others run
    ``python -m torch.distributed.run``.

    Args:
        config: the merged config.
        script, script_args: what to run.
        port: the rendezvous port to use on a single machine when the config has none (or 0); without one, a
            free port is bound when the run starts.

    Raises:
        UsageError: port 0 (free port) on several machines, which cannot agree on a random port.
    """
    serves_store = config.num_machines == 1 or (config.rdzv_backend == "static" and config.machine_rank == 0)
    runner = "notebook_accel.cli.torchrun_bound" if serves_store else "torch.distributed.run"
    cmd = [sys.executable, "-m", runner, "--nproc_per_node", str(config.processes_per_machine),
           "--nnodes", str(config.num_machines)]
    if config.num_machines == 1:
        chosen = config.main_process_port or port or 0  # 0: torchrun_bound binds a free port and holds it
        cmd += ["--node_rank", "0", "--master_addr", config.main_process_ip or "127.0.0.1",
                "--master_port", str(chosen)]
    else:
        if config.main_process_port == 0:
            raise UsageError("main_process_port 0 (pick a free port) only works on one machine; every machine must "
                             f"use the same port, so give one such as --main_process_port {DEFAULT_PORT}")
        port_ = config.main_process_port or DEFAULT_PORT
        if config.rdzv_backend == "static":
            cmd += ["--node_rank", str(config.machine_rank), "--master_addr", str(config.main_process_ip),
                    "--master_port", str(port_)]
        else:
            cmd += ["--rdzv_backend", config.rdzv_backend, "--rdzv_endpoint", f"{config.main_process_ip}:{port_}",
                    "--rdzv_id", "notebook-accel"]
            if config.rdzv_backend == "c10d":
                # machine 0 is main_process_ip's machine: say so, as torch guesses it from the host name, which
                # fails where the address is not the one the host name resolves to (a second interface, a netns)
                cmd += ["--rdzv_conf", f"is_host={str(config.machine_rank == 0).lower()}"]
                if config.machine_rank == 0:  # the address the workers reach rank 0 at (else its host name's)
                    cmd += ["--local_addr", str(config.main_process_ip)]
    return [*cmd, script, *script_args]


def child_environment(config: Config) -> dict[str, str | None]:
    """The variables to set for the launched processes (``None`` keeps the current value).

    Raises:
        UsageError: ``gpu_ids`` names a GPU beyond the ones ``CUDA_VISIBLE_DEVICES`` leaves visible.
    """
    # only choices that differ from the Accelerator's own defaults, so a script's explicit arguments meet no
    # surprise variables
    out: dict[str, str | None] = dict(environment.launch_choices(
        device="cpu" if config.use_cpu else None,
        mixed_precision=None if config.mixed_precision == "no" else config.mixed_precision,
        gradient_accumulation_steps=None if config.gradient_accumulation_steps == 1 else
        config.gradient_accumulation_steps,
        engine=launch_value(config),
        fp8=config.fp8_options,
    ))
    ids = config.gpu_id_list
    if ids is not None and not config.use_cpu:
        visible = environment.cuda_visible_devices()
        if visible is not None:
            missing = [i for i in ids if i >= len(visible)]
            if missing:
                raise UsageError(f"gpu_ids {config.gpu_ids!r} names GPU(s) {missing} but CUDA_VISIBLE_DEVICES="
                                 f"{','.join(visible)!r} leaves only {len(visible)} visible; use indices below "
                                 f"{len(visible)}")
            out[environment.CUDA_VISIBLE_DEVICES] = ",".join(visible[i] for i in ids)
        else:
            out[environment.CUDA_VISIBLE_DEVICES] = config.gpu_ids
    return out


def refuse_fp8_here(config: Config) -> None:
    """Before torchrun starts: refuse ``mixed_precision: fp8`` that cannot run on this machine (torchao missing, a
    chosen GPU older than compute capability 8.9), unless the config asks for emulation.

    Raises:
        UsageError: naming what is missing.
    """
    if config.mixed_precision != "fp8":
        return
    gpus, ids = ([] if config.use_cpu else hardware.detect_gpus()), config.gpu_id_list  # ids: visible positions
    chosen = gpus if ids is None else [gpus[i] for i in ids if i < len(gpus)]
    engine = str(config.distributed_type) if config.distributed_type in ("FSDP", "DEEPSPEED") else "DDP"
    problems = fp8_problems(emulate=asks_for_emulation(config.extra), engine=engine,
                            capabilities=[g.compute_capability for g in chosen] or None)
    if problems:
        raise UsageError("; ".join(problems))


def merged_config(args: argparse.Namespace) -> Config:
    """The config file overridden by the flags given on the command line."""
    config, _ = active_config(args.config_file)
    return config.override(
        **{name: getattr(args, name) for name in (*_INT_FLAGS, "mixed_precision", "gpu_ids", "main_process_ip",
                                                   "rdzv_backend")},
        use_cpu=args.cpu,
    )


def launch(args: argparse.Namespace) -> int:
    """Run the ``launch`` subcommand."""
    config = merged_config(args)
    if not args.dry_run and not os.path.isfile(args.script):
        raise UsageError(f"no script at {args.script!r}; give the path of a Python file (options go before it)")
    cluster = cluster_from_flags(config.cluster, args)
    if cluster is not None:
        if args.dry_run:
            print(f"would run {args.script} on {config.num_processes} workers of {cluster.describe()}")
            return EXIT_OK
        try:
            launch_on_cluster(config, cluster, args.script, list(args.script_args))
        except Exception as e:  # noqa: BLE001 - the launcher's error says what failed; exit non-zero with it
            error(f"the run on the cluster failed: {type(e).__name__}: {e}")
            return EXIT_FAILED
        return EXIT_OK
    refuse_fp8_here(config)
    cmd = torchrun_command(config, args.script, list(args.script_args))
    variables = child_environment(config)
    if args.dry_run:
        print(shlex.join(cmd))  # quoted: safe to paste into a shell
        for name, value in sorted(variables.items()):
            print(f"unset {name}" if value is None else f"export {name}={shlex.quote(value)}")
        return EXIT_OK
    code, _ = run_child(cmd, environment.environ_with(variables))
    if code != 0:
        error(f"the run failed: torch.distributed.run exited with code {code} (see the output above)")
        return EXIT_FAILED
    return EXIT_OK
