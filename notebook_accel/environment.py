"""The one module that reads and writes environment variables.

A launched worker learns who it is from the environment, the same variables ``torchrun`` sets (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), plus a few of ours
that carry launch choices into the worker's :class:`~notebook_accel.Accelerator` (device, mixed precision,
gradient accumulation). Everything else in the package asks this module rather than ``os.environ``, so the
whole contract is visible here.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["EngineLaunch", "LaunchEnvironment", "CONFIG_FILE_VAR", "cuda_visible_devices", "config_file_path",
           "log_root", "hf_home", "patched_environ", "cleared_environ", "imports_for_workers", "apply_import_effects"]

RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
DEVICE = "NOTEBOOK_ACCEL_DEVICE"
MIXED_PRECISION = "NOTEBOOK_ACCEL_MIXED_PRECISION"
ACCELERATE_MIXED_PRECISION = "ACCELERATE_MIXED_PRECISION"  # accelerate's name for it: written beside ours, read after
GRADIENT_ACCUMULATION_STEPS = "NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS"
FP8 = "NOTEBOOK_ACCEL_FP8"
FSDP = "NOTEBOOK_ACCEL_FSDP"
DEEPSPEED = "NOTEBOOK_ACCEL_DEEPSPEED"
ENGINE_VARIABLES: tuple[str, ...] = (FSDP, DEEPSPEED)  # NOTEBOOK_ACCEL_<engine name>: one per sharded engine
_ENGINE_PREFIX = "NOTEBOOK_ACCEL_"
LAUNCHED = "NOTEBOOK_ACCEL_LAUNCHED"
CONFIG_FILE_VAR = "NOTEBOOK_ACCEL_CONFIG_FILE"
RESTART_COUNT = "NOTEBOOK_ACCEL_RESTART_COUNT"
RESUME_FROM = "NOTEBOOK_ACCEL_RESUME_FROM"
STORE_SECRET = "NOTEBOOK_ACCEL_STORE_SECRET"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
OMP_NUM_THREADS = "OMP_NUM_THREADS"
HF_HOME = "HF_HOME"
XDG_CACHE_HOME = "XDG_CACHE_HOME"
# Set by torch's own modules when imported (torch._dynamo sets the inductor cache folder as it loads).
IMPORT_VARIABLES: tuple[str, ...] = ("TORCHINDUCTOR_CACHE_DIR",)
_import_effects: dict[str, tuple[str | None, str]] = {}  # name: (value before the kernel's import, value it set)


def _int_or(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    """Read an integer variable; a missing or empty one gives ``default``."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise ValueError(
            f"environment variable {name}={raw!r} is not an integer; unset it or set it to a whole number"
        ) from e


@dataclass(frozen=True)
class EngineLaunch:
    """The engine a launch config asks for, as it travels from the launcher to each worker's Accelerator.

    Attributes:
        name: the engine's ``distributed_type`` value (``"FSDP"``, ``"DEEPSPEED"``).
        options: its plugin's fields as JSON (``plugin.to_json()``).

    Example:
        >>> EngineLaunch("FSDP", "{}").variable
        'NOTEBOOK_ACCEL_FSDP'
    """

    name: str
    options: str

    @property
    def variable(self) -> str:
        """The variable that carries it (``NOTEBOOK_ACCEL_<name>``; torchrun launches and saved configs rely on it)."""
        return _ENGINE_PREFIX + self.name


def _engine_launch(environ: Mapping[str, str]) -> EngineLaunch | None:
    """The engine variable that is set, or ``None``.

    Raises:
        ValueError: more than one is set (a run trains with one engine).
    """
    found = [EngineLaunch(name[len(_ENGINE_PREFIX):], environ[name]) for name in ENGINE_VARIABLES if environ.get(name)]
    if len(found) > 1:
        raise ValueError(f"environment variables {' and '.join(e.variable for e in found)} are both set, but a run "
                         "trains with one engine; unset one of them")
    return found[0] if found else None


@dataclass(frozen=True)
class LaunchEnvironment:
    """Who this process is in a run, as the environment says.

    Built with :meth:`from_environ` in a worker (or under ``torchrun``, or in a plain single process, where
    every field takes its default); written into a worker's environment by the launcher with
    :meth:`to_environ`.

    Attributes:
        rank: global rank of this process (``RANK``), 0 in a single process.
        local_rank: rank on this machine (``LOCAL_RANK``).
        world_size: number of processes in the run (``WORLD_SIZE``).
        local_world_size: number of processes on this machine (``LOCAL_WORLD_SIZE``).
        master_addr: rendezvous address (``MASTER_ADDR``), ``None`` when unset.
        master_port: rendezvous port (``MASTER_PORT``), ``None`` when unset.
        device: the device the launcher chose (``"cpu"``, ``"cuda:1"``), ``None`` when not launched by us.
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"`` from the launcher or config, else ``None``.
        gradient_accumulation_steps: from the launch config, else ``None``.
        fp8: the launch config's ``fp8_config`` options as JSON (``{"emulate": true}``), else ``None``.
        engine: the sharded engine the launch config asks for and its plugin (``distributed_type: FSDP`` sets
            ``NOTEBOOK_ACCEL_FSDP``, ``DEEPSPEED`` ``NOTEBOOK_ACCEL_DEEPSPEED``), else ``None``.
        launched: True inside a process started by :func:`notebook_accel.notebook_launcher`.
        extra_vars: more variables for a launched worker (the kernel's rendezvous
            store, the loopback interface, a restart's checkpoint), as (name, value) pairs.

    Example:
        >>> env = LaunchEnvironment.from_environ({"RANK": "1", "WORLD_SIZE": "2"})
        >>> (env.rank, env.world_size, env.is_distributed)
        (1, 2, True)
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    device: str | None = None
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    fp8: str | None = None
    engine: EngineLaunch | None = None
    launched: bool = False
    extra_vars: tuple[tuple[str, str], ...] = ()

    def engine_options(self, name: str) -> str | None:
        """The plugin JSON the launch config sends for engine ``name`` (``"FSDP"``), or ``None`` when it names
        another engine or none."""
        return self.engine.options if self.engine is not None and self.engine.name == name else None

    @property
    def is_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
        """Read the variables from ``environ`` (default ``os.environ``).

        Raises:
            ValueError: a variable has a value of the wrong kind, or two engine variables are set.
        """
        env = os.environ if environ is None else environ
        world_size = _int_or(env, WORLD_SIZE, 1) or 1
        rank = _int_or(env, RANK, 0) or 0
        return cls(
            rank=rank,
            local_rank=_int_or(env, LOCAL_RANK, rank) or 0,
            world_size=world_size,
            local_world_size=_int_or(env, LOCAL_WORLD_SIZE, world_size) or 1,
            master_addr=env.get(MASTER_ADDR) or None,
            master_port=_int_or(env, MASTER_PORT, None),
            device=env.get(DEVICE) or None,
            mixed_precision=env.get(MIXED_PRECISION) or env.get(ACCELERATE_MIXED_PRECISION) or None,
            gradient_accumulation_steps=_int_or(env, GRADIENT_ACCUMULATION_STEPS, None),
            fp8=env.get(FP8) or None,
            engine=_engine_launch(env),
            launched=env.get(LAUNCHED, "") == "1",
        )

    def to_environ(self) -> dict[str, str]:
        """The variables that describe this process, for a worker's ``os.environ``."""
        out = {
            RANK: str(self.rank),
            LOCAL_RANK: str(self.local_rank),
            WORLD_SIZE: str(self.world_size),
            LOCAL_WORLD_SIZE: str(self.local_world_size),
        }
        if self.master_addr is not None:
            out[MASTER_ADDR] = self.master_addr
        if self.master_port is not None:
            out[MASTER_PORT] = str(self.master_port)
        if self.device is not None:
            out[DEVICE] = self.device
        if self.mixed_precision is not None:
            out[MIXED_PRECISION] = out[ACCELERATE_MIXED_PRECISION] = self.mixed_precision
        if self.gradient_accumulation_steps is not None:
            out[GRADIENT_ACCUMULATION_STEPS] = str(self.gradient_accumulation_steps)
        if self.fp8 is not None:
            out[FP8] = self.fp8
        if self.engine is not None:
            out[self.engine.variable] = self.engine.options
        if self.launched:
            out[LAUNCHED] = "1"
        out.update(self.extra_vars)
        return out

    def apply(self, environ: MutableMapping[str, str] | None = None) -> None:
        """Write :meth:`to_environ` into ``environ`` (default ``os.environ``), removing our stale variables."""
        env = os.environ if environ is None else environ
        for name in (MASTER_ADDR, MASTER_PORT, DEVICE, MIXED_PRECISION, GRADIENT_ACCUMULATION_STEPS, FP8,
                     *ENGINE_VARIABLES, LAUNCHED):
            if name in env:  # os.environ.pop of an absent name raises and catches a KeyError: costly in a new worker
                del env[name]
        env.update(self.to_environ())


def cuda_visible_devices(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs), or ``None`` when it is unset.

    An empty value means no GPU is visible and gives ``[]``. Entries after an invalid one are ignored by
    CUDA itself; we keep them all and let the caller validate against the real device count.
    """
    env = os.environ if environ is None else environ
    raw = env.get(CUDA_VISIBLE_DEVICES)
    if raw is None:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def restart_state(environ: Mapping[str, str] | None = None) -> tuple[int, str | None]:
    """In a worker restarted by ``notebook_launcher(max_restarts=...)``: (how many restarts so far, the
    checkpoint the failed attempt saved last); ``(0, None)`` in a first attempt."""
    env = os.environ if environ is None else environ
    return _int_or(env, RESTART_COUNT, 0) or 0, env.get(RESUME_FROM) or None


def restart_variables(attempt: int, resume_from: str | None) -> dict[str, str]:
    """The variables a restarted worker reads back with :func:`restart_state`."""
    return {RESTART_COUNT: str(attempt), **({} if resume_from is None else {RESUME_FROM: resume_from})}


def config_file_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The config file named by ``NOTEBOOK_ACCEL_CONFIG_FILE``, or ``None`` when unset."""
    env = os.environ if environ is None else environ
    return env.get(CONFIG_FILE_VAR) or None


def hf_home(environ: Mapping[str, str] | None = None) -> str:
    """Hugging Face's home folder: ``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    env = os.environ if environ is None else environ
    if env.get(HF_HOME):
        return env[HF_HOME]
    return os.path.join(env.get(XDG_CACHE_HOME) or os.path.expanduser("~/.cache"), "huggingface")


XDG_CONFIG_HOME = "XDG_CONFIG_HOME"


LOG_DIR = "NOTEBOOK_ACCEL_LOG_DIR"
_OFF = ("off", "none", "no", "false", "0")


def log_root(environ: Mapping[str, str] | None = None) -> str | None:
    """Where launches keep each rank's output: ``$NOTEBOOK_ACCEL_LOG_DIR``, else ``runs`` (relative to the
    working directory); ``None`` when the variable says ``off`` (or ``none``, ``no``, ``false``, ``0``)."""
    env = os.environ if environ is None else environ
    value = (env.get(LOG_DIR) or "").strip()
    if value.lower() in _OFF:
        return None
    return value or "runs"


def config_home(environ: Mapping[str, str] | None = None) -> str:
    """The user's configuration folder: ``$XDG_CONFIG_HOME``, else ``~/.config`` (our config file lives below)."""
    env = os.environ if environ is None else environ
    return env.get(XDG_CONFIG_HOME) or os.path.expanduser("~/.config")


def launch_choices(
    *, device: str | None = None, mixed_precision: str | None = None, gradient_accumulation_steps: int | None = None,
    engine: EngineLaunch | None = None, fp8: str | None = None,
) -> dict[str, str]:
    """Our variables that carry launch choices to a launched script's Accelerator (``notebook-accel launch``).

    Only the choices given (not ``None``) appear; ``torchrun`` adds the rank variables itself.

    Example:
        >>> launch_choices(mixed_precision="bf16")
        {'NOTEBOOK_ACCEL_MIXED_PRECISION': 'bf16', 'ACCELERATE_MIXED_PRECISION': 'bf16'}
    """
    out: dict[str, str] = {}
    if device is not None:
        out[DEVICE] = device
    if mixed_precision is not None:
        out[MIXED_PRECISION] = out[ACCELERATE_MIXED_PRECISION] = mixed_precision
    if gradient_accumulation_steps is not None:
        out[GRADIENT_ACCUMULATION_STEPS] = str(gradient_accumulation_steps)
    if engine is not None:
        out[engine.variable] = engine.options
    if fp8 is not None:
        out[FP8] = fp8
    return out


def environ_with(values: Mapping[str, str | None]) -> dict[str, str]:
    """A copy of ``os.environ`` with ``values`` set (``None`` removes one), for a child process's ``env=``."""
    out = dict(os.environ)
    for name, value in values.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def get(name: str, default: str | None = None) -> str | None:
    """Read any variable (for the few modules that need one not listed above; prefer a named helper)."""
    return os.environ.get(name, default)


@contextmanager
def patched_environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, remove) variables for the duration of a ``with`` block, then restore them.

    Used by the in-process (``num_processes=1``) launch so the kernel's environment is left as it was.
    """
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def cleared_environ() -> Iterator[None]:
    """An empty environment for a ``with`` block, then exactly the one before (what the block set is removed)."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def set_var(name: str, value: str) -> None:
    """Set one variable in this process (worker set-up: thread counts, NVML check)."""
    os.environ[name] = value


def ensure_local_rank(local_rank: int) -> None:
    """Set ``LOCAL_RANK`` when it is unset (DeepSpeed reads it, also in a single process started without a
    launcher); a value the launcher set is kept."""
    os.environ.setdefault(LOCAL_RANK, str(local_rank))


@contextmanager
def imports_for_workers() -> Iterator[None]:
    """Import modules in the kernel on the workers' behalf (the launcher's warm-up) without changing the
    kernel's environment.

    An import there is paid once and shared by every forked worker, so what it writes into ``os.environ``
    (:data:`IMPORT_VARIABLES`: ``torch._dynamo`` sets ``TORCHINDUCTOR_CACHE_DIR``) belongs to the workers: it
    is undone in the kernel when the block ends, where it would change where the user's own ``torch.compile``
    writes, and kept for :func:`apply_import_effects`, which each worker calls.
    """
    before = {name: os.environ.get(name) for name in IMPORT_VARIABLES}
    try:
        yield
    finally:
        for name, old in before.items():
            new = os.environ.get(name)
            if new == old:
                continue
            if new is not None:
                _import_effects[name] = (old, new)
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def apply_import_effects() -> None:
    """In a worker: set what the kernel's warm-up imports set and :func:`imports_for_workers` kept out of the
    kernel, as if the worker had imported the modules itself; a variable the user changed since is left alone."""
    for name, (old, new) in _import_effects.items():
        if os.environ.get(name) == old:
            os.environ[name] = new
