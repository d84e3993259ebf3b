"""``notebook-accel env``: versions, devices and the active config, to paste into a bug report."""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path
from importlib import metadata

import yaml

from notebook_accel import __version__, environment, hardware
from notebook_accel.cli.common import EXIT_FAILED, EXIT_OK, active_config
from notebook_accel.config import ConfigError
from notebook_accel.config.io import config_to_dict

__all__ = ["register", "report"]

_PACKAGES = ("torch", "numpy", "pyyaml", "ipywidgets", "ipykernel", "matplotlib")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``env`` subcommand."""
    parser = commands.add_parser(
        "env",
        help="print versions, devices and the active config (for bug reports)",
        description="Print versions, devices and the active config; paste the output into bug reports.",
    )
    parser.add_argument("--config_file", "--config-file", metavar="FILE", help="config to show (default: the "
                        "default config, if any)")
    parser.add_argument("--build-deepspeed-ops", "--build_deepspeed_ops", action="store_true",
                        help="compile the ops DeepSpeed would otherwise compile in every worker of a first run "
                        "(on CPU its communication op, a few minutes), then exit")
    parser.set_defaults(run=report)


def _version(package: str) -> str:
    """A package's installed version without importing it (importing torch would be slow)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _device_lines() -> list[str]:
    gpus = hardware.detect_gpus()
    lines = [f"- CPU cores available: {hardware.cpu_count()}"]
    if not gpus:
        lines.append("- GPUs: none detected")
    for gpu in gpus:
        capability = ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else "unknown"
        lines.append(f"- GPU {gpu.index}: {gpu.name}, {gpu.total_memory_bytes / 2**30:.1f} GiB, "
                     f"compute capability {capability}")
    visible = environment.cuda_visible_devices()
    lines.append(f"- CUDA_VISIBLE_DEVICES: {'unset' if visible is None else ','.join(visible) or '(empty)'}")
    return lines


def _config_lines(config_file: str | None) -> list[str]:
    try:
        config, path = active_config(config_file)
    except ConfigError as e:
        return [f"- Config: cannot be used: {e}"]
    where = str(path) if path else "none found, built-in defaults"
    lines = [f"- Config file: {where}"]
    text = yaml.safe_dump(config_to_dict(config), sort_keys=False, default_flow_style=False)
    lines += [f"    {line}" for line in text.splitlines()]
    return lines


def _build_deepspeed_ops() -> int:
    """``--build-deepspeed-ops``: compile DeepSpeed's just-in-time ops now; exit 1 when that is not possible."""
    try:
        from notebook_accel.engines.deepspeed.jit_ops import build_ops
    except ImportError as e:
        print(f"notebook-accel env: --build-deepspeed-ops needs deepspeed ({e}); pip install "
              "notebook-accel[deepspeed]", file=sys.stderr)
        return EXIT_FAILED
    try:
        build_ops()
    except Exception as e:  # noqa: BLE001 - a stale lock, a missing compiler or ninja: say which and stop
        print(f"notebook-accel env: building DeepSpeed's ops failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _interpreter() -> str:
    """The running interpreter: ``.venv/bin/python`` inside a virtual environment (named from its folder: where it
    was created is the user's business, and a report or a notebook output should not depend on it), else its
    path."""
    executable = Path(sys.executable)
    if sys.prefix != sys.base_prefix:
        try:
            return str(executable.relative_to(Path(sys.prefix).parent))
        except ValueError:  # an interpreter outside its environment's folder (a symlinked one)
            pass
    return str(executable)


def report(args: argparse.Namespace) -> int:
    """Print the report; an invalid config is shown, not fatal (exit code 0). With ``--build-deepspeed-ops``,
    compile DeepSpeed's just-in-time ops instead."""
    if getattr(args, "build_deepspeed_ops", False):
        return _build_deepspeed_ops()
    lines = [
        "Copy-and-paste the text below in your bug report.",
        "",
        f"- notebook-accel version: {__version__}",
        f"- Platform: {platform.platform()}",
        f"- Python version: {sys.version.split()[0]} ({_interpreter()})",
        *(f"- {name} version: {_version(name)}" for name in _PACKAGES),
        *_device_lines(),
        *_config_lines(args.config_file),
    ]
    print("\n".join(lines))
    return EXIT_OK
