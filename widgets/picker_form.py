"""The config picker's pure parts: what the form shows of the hardware, and the rules between form and Config.

No widget here: the :class:`~widgets.config_picker.ConfigPicker` reads its controls' values and passes them in, so
these rules are testable without ipywidgets (and the picker keeps only the wiring of its controls).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from notebook_accel.config import Config, ConfigError, resolve_config
from notebook_accel.config.machine import config_for_machine
from notebook_accel.errors import shown
from notebook_accel.hardware import GpuInfo

__all__ = ["gib", "hardware_html", "asks_for_gpus", "check_hardware", "starting_config", "form_problems",
           "gpu_ids", "effective_batch_html"]


def gib(size: int) -> str:
    """``size`` bytes as GiB with one decimal (``"79.6 GiB"``)."""
    return f"{size / 2**30:.1f} GiB"


def hardware_html(cpus: int, gpus: Sequence[GpuInfo]) -> str:
    """The hardware line above the form: the CPU cores and each GPU's name and memory (or that there is none)."""
    parts = [f"<b>CPU</b>: {cpus} cores"]
    if not gpus:
        parts.append("<b>GPUs</b>: none detected")
    for g in gpus:
        parts.append(f"<b>GPU {g.index}</b>: {html.escape(g.name)}, {gib(g.total_memory_bytes)}")
    return "<br>".join(parts)


def asks_for_gpus(config: Config) -> bool:
    """Whether ``config`` names GPUs itself (a default config only leaves the choice to the machine)."""
    return not config.use_cpu and (config.gpu_ids is not None or config.distributed_type == "MULTI_GPU")


def check_hardware(cpu_count: object, gpus: object) -> None:
    """Refuse a ``cpu_count`` or ``gpus`` the form cannot show (a clear ``ConfigError``, not a TypeError later).

    Raises:
        ConfigError: ``cpu_count`` is not a whole number from 1 to 2**20 or ``None``, or ``gpus`` is not a list of
            :class:`~notebook_accel.hardware.GpuInfo` or ``None``.
    """
    if cpu_count is not None and (type(cpu_count) is not int or not 1 <= cpu_count <= 1 << 20):
        raise ConfigError([f"cpu_count: got {shown(cpu_count)}; allowed: a whole number from 1 to {1 << 20}, or None "
                           "to detect this machine's"])
    if gpus is not None and (isinstance(gpus, (str, bytes)) or not isinstance(gpus, Sequence)
                             or not all(isinstance(g, GpuInfo) for g in gpus)):
        raise ConfigError([f"gpus: got {shown(gpus)}; allowed: a list of notebook_accel.hardware.GpuInfo, or None "
                           "to detect this machine's"])


def starting_config(config: object, gpus: Sequence[GpuInfo]) -> tuple[Config, str | None]:
    """The config to show first and a note when the default file could not be used.

    Args:
        config: what the picker was given: a :class:`Config`, a path, or ``None`` for the default file.
        gpus: this machine's GPUs (a config made for the machine when there is no file).

    Raises:
        ConfigError: a ``config`` given explicitly cannot be read.
    """
    if config is not None:
        return resolve_config(config) or config_for_machine(gpus), None
    try:
        found = resolve_config(None)
    except ConfigError as e:
        return config_for_machine(gpus), f"default config not used: {e.problems[0]}"
    return (found, None) if found is not None else (config_for_machine(gpus), None)


def form_problems(on_gpu: bool, chosen_gpus: int, processes: int, process_limit: int, cpus: int, machines: int,
                  port: int) -> list[str]:
    """Problems the Config cannot see: they come from how the form maps to it.

    Args:
        on_gpu: the device control says GPU.
        chosen_gpus: how many GPUs are selected.
        processes: processes per machine asked for; ``process_limit`` the most the chosen devices allow.
        cpus: this machine's CPU cores.
        machines: the number of machines; ``port`` the port asked for (0: pick a free one).

    Returns:
        One line per problem, naming the value and what is allowed (empty when the form maps cleanly).
    """
    out = []
    if on_gpu and not chosen_gpus:
        out.append("GPUs: select at least one GPU, or choose CPU")
    if processes > process_limit:
        devices = f"{chosen_gpus} GPU(s) chosen" if on_gpu else f"{cpus} CPU cores"
        out.append(f"processes per machine: {processes} is more than the chosen devices allow "
                   f"({devices}); use 1 to {process_limit}")
    if machines > 1 and port == 0:
        out.append("port: 0 (pick a free port) only works on one machine; every machine must use the same "
                   "port, e.g. 29500")
    return out


def gpu_ids(on_gpu: bool, chosen: Sequence[int], every: Sequence[int]) -> str | None:
    """``Config.gpu_ids`` for the selection: ``None`` on CPU or with none chosen, ``"all"``, or ``"0,2"``."""
    if not on_gpu:
        return None
    ordered = sorted(chosen)
    return "all" if ordered == list(every) else ",".join(map(str, ordered)) or None


def effective_batch_html(config: Config | None) -> str:
    """The effective batch size line: its product spelled out, or how to see it."""
    if config is None or config.effective_batch_size is None:
        return "Effective batch size: set a batch size per device to see it"
    return (f"Effective batch size: <b>{config.effective_batch_size}</b> = {config.per_device_batch_size} per "
            f"device × {config.num_processes} processes × {config.gradient_accumulation_steps} accumulation steps")
