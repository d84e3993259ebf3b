"""``notebook_launcher``: resolve the arguments, check everything before forking, then run and supervise."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from notebook_accel import hardware
from notebook_accel.config import Config, resolve_config
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import LaunchError
from notebook_accel.events import RunInfo, Sink
from notebook_accel.launcher import preflight
from notebook_accel.launcher.inprocess import run_in_process
from notebook_accel.launcher.ports import check_port_free, free_port
from notebook_accel.launcher.rendezvous import StoreServer, bind_listener, worker_variables
from notebook_accel.launcher.runlogs import create_run_folder, display_path
from notebook_accel.launcher.sinks import GuardedSink, choose_sink
from notebook_accel.launcher.spawn import start_workers
from notebook_accel.launcher.supervisor import finish_aborted, supervise
from notebook_accel.launcher.tracebacks import user_facing

__all__ = ["notebook_launcher"]

_DEFAULT_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class _Settings:
    """The launch after merging explicit arguments (first), the config (second) and defaults."""

    num_processes: int | None
    gpu_ids: object
    use_cpu: bool
    mixed_precision: str | None
    gradient_accumulation_steps: int | None
    port: int | None
    master_addr: str
    num_nodes: int
    node_rank: int


def _settings(
    config: Config | None,
    num_processes: int | None,
    gpu_ids: object,
    use_cpu: bool | None,
    mixed_precision: str | None,
    gradient_accumulation_steps: int | None,
    use_port: int | str | None,
    master_addr: str,
    num_nodes: int,
    node_rank: int,
) -> _Settings:
    """Apply the precedence: explicit argument > config > default (``master_addr``/``num_nodes``/``node_rank``
    count as not given while they hold their defaults)."""

    def pick(given: Any, name: str) -> Any:
        """The argument if given, else the config's field (``None`` without a config)."""
        return given if given is not None or config is None else getattr(config, name)

    if config is not None and num_nodes == 1 and config.num_machines > 1:
        num_nodes, node_rank = config.num_machines, config.machine_rank
    if config is not None and config.main_process_ip and master_addr == _DEFAULT_ADDR:
        master_addr = config.main_process_ip
    return _Settings(
        num_processes=pick(num_processes, "processes_per_machine"),
        gpu_ids=pick(gpu_ids, "gpu_ids"),
        use_cpu=bool(pick(use_cpu, "use_cpu")),
        mixed_precision=pick(mixed_precision, "mixed_precision"),
        gradient_accumulation_steps=pick(gradient_accumulation_steps, "gradient_accumulation_steps"),
        port=preflight.check_port(pick(use_port, "main_process_port")),  # the config's 0 means "pick one"
        master_addr=master_addr,
        num_nodes=num_nodes,
        node_rank=node_rank,
    )


def _choose_port(port: int | None, master_addr: str, node_rank: int) -> int:
    """The user's port (checked on node 0, which serves the rendezvous) or a free one."""
    if port is not None:
        if node_rank == 0:
            check_port_free(port, master_addr)
        return port
    try:
        return free_port(master_addr)
    except OSError as e:
        raise LaunchError(
            f"master_addr={master_addr!r} is not an address of this machine ({e}); use '127.0.0.1' for a "
            "single machine, or this machine's address on the network for node 0"
        ) from e


def _environments(
    devices: Sequence[str], node_rank: int, num_nodes: int, master_addr: str, port: int,
    mixed_precision: str | None, gradient_accumulation_steps: int | None, backend_vars: dict[str, str],
) -> list[LaunchEnvironment]:
    """One launch environment per local worker; global rank = node_rank * local workers + local rank."""
    local = len(devices)
    return [
        LaunchEnvironment(
            rank=node_rank * local + i, local_rank=i, world_size=num_nodes * local, local_world_size=local,
            master_addr=master_addr, master_port=port, device=device, mixed_precision=mixed_precision,
            gradient_accumulation_steps=gradient_accumulation_steps, launched=True,
            backend_vars=tuple(backend_vars.items()),
        )
        for i, device in enumerate(devices)
    ]


def _function_name(function: Callable[..., Any]) -> str:
    """``train`` for a function, the class name for another callable."""
    return str(getattr(function, "__qualname__", None) or type(function).__name__)


@user_facing
def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    *,
    mixed_precision: str | None = None,
    use_port: int | str | None = None,
    master_addr: str = _DEFAULT_ADDR,
    gpu_ids: str | int | Sequence[int] | None = None,
    timeout: float | None = None,
    config: Any = None,
    gradient_accumulation_steps: int | None = None,
    num_nodes: int = 1,
    node_rank: int = 0,
    dashboard: bool | Sink | None = None,
    show_all_ranks: bool = False,
    use_cpu: bool | None = None,
) -> Any:
    """Run ``function(*args)`` on every device of this machine, forked from the live kernel; return rank 0's value.

    Each worker gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, its device and launch choices (read by the workers' ``Accelerator``), and
    ``cores / workers`` threads. Worker ``i`` uses visible CUDA device ``i`` (or ``gpu_ids[i]``) with nccl, or
    the CPU with gloo when no GPU is visible. ``num_processes=1`` runs in this process (no fork). Every
    argument left ``None`` comes from ``config`` (or the default config file), else the default.

    Each worker's whole output (stdout and stderr in the order written, as a terminal shows it) is kept in
    ``runs/<date>-<time>-<function>/rank<N>.log`` (the root is ``$NOTEBOOK_ACCEL_LOG_DIR``; ``off`` keeps none);
    the dashboard and the console say where. Errors raised here carry none of the launcher's frames.

    Args:
        function: the training function; any callable (lambdas and functions defined in the notebook work).
        args: positional arguments for ``function``.
        num_processes: processes on this machine; ``None``: one per visible GPU (else 1).
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``; reaches every worker's ``Accelerator``.
        use_port: rendezvous port (an int, or a string of digits as accelerate takes it); ``None`` picks a free
            one (single machine). A busy port is refused.
        master_addr: rendezvous address (node 0's address for several machines).
        gpu_ids: restrict this launch to these visible GPUs: ``"all"``, ``"0,2"``, ``[0, 2]``.
        timeout: seconds; a run still going then is stopped and :class:`LaunchTimeoutError` raised.
        config: a ``Config``, a YAML path, a config picker, or ``None`` for the default file (if any).
        gradient_accumulation_steps: reaches every worker's ``Accelerator``.
        num_nodes: machines taking part (run the same call on each, with its ``node_rank``).
        node_rank: this machine's index, 0 to ``num_nodes - 1``.
        dashboard: ``None`` (a live dashboard in Jupyter when ipywidgets is installed, else console output),
            ``True``, ``False`` (console), or any :class:`~notebook_accel.events.Sink`.
        show_all_ranks: show every rank's output, not only the main process's (others' errors always show).
        use_cpu: run on CPU with gloo even when GPUs are visible.

    Returns:
        What ``function`` returned on rank 0 (``None`` on other nodes than node 0).

    Raises:
        LaunchError: a bad argument, a busy port, more processes than GPUs; nothing was started.
        CudaInitializedError: CUDA is already initialised in the kernel; restart the kernel.
        WorkerError: a worker raised or died; the others were stopped; names every failing rank.
        LaunchTimeoutError: the run took longer than ``timeout``.
        KeyboardInterrupt: the stop button; every worker was stopped first.
        With ``num_processes=1``, the function's own exception is raised unchanged.

    Example:
        >>> def train(lr):
        ...     import torch.distributed as dist
        ...     dist.init_process_group("gloo")
        ...     ...
        ...     return dist.get_rank()
        >>> notebook_launcher(train, args=(1e-3,), num_processes=2)   # doctest: +SKIP
        Launching 2 processes on CPU (gloo)
        Finished in 1.2 s
        0
    """
    start = time.monotonic()
    preflight.check_callable(function)
    preflight.check_flag("show_all_ranks", show_all_ranks)
    preflight.check_flag("use_cpu", use_cpu, optional=True)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise LaunchError(f"args={args!r:.80} is not allowed; pass a tuple of positional arguments, e.g. args=(lr,)")
    s = _settings(resolve_config(config), num_processes, gpu_ids, use_cpu, mixed_precision,
                  gradient_accumulation_steps, use_port, master_addr, num_nodes, node_rank)
    precision = preflight.check_mixed_precision(s.mixed_precision)
    steps = None if s.gradient_accumulation_steps is None else preflight.check_positive_int(
        "gradient_accumulation_steps", s.gradient_accumulation_steps)
    limit = preflight.check_timeout(timeout)
    preflight.check_master_addr(s.master_addr)
    nodes, node = preflight.check_nodes(s.num_nodes, s.node_rank, s.port, s.master_addr)
    devices, backend = preflight.resolve_devices(s.num_processes, s.gpu_ids, s.use_cpu)
    local = len(devices)
    # A timeout bounds a single process by running it in one forked worker: stopping a forked process is safe,
    # while interrupting the kernel's own thread (SIGALRM) could land inside an import and break the kernel.
    in_process = local == 1 and nodes == 1 and limit is None
    if backend == "nccl" and not in_process:
        preflight.refuse_if_cuda_initialized()
    # Node 0 of a forked run serves the rendezvous store itself, bound to master_addr only (.rendezvous).
    listener = bind_listener(s.master_addr, s.port) if node == 0 and not in_process else None
    port = _choose_port(s.port, s.master_addr, node) if listener is None else int(listener.getsockname()[1])
    variables = {} if in_process else worker_variables(s.master_addr, nodes)
    envs = _environments(devices, node, nodes, s.master_addr, port, precision, steps, variables)
    store = None if listener is None else StoreServer(listener, nodes * local)
    try:
        return _run(function, tuple(args), dashboard, show_all_ranks, node, local, devices, backend, precision,
                    in_process, envs, limit, start, store)
    finally:
        if store is not None:
            store.close()


def _run(
    function: Callable[..., Any], args: tuple[Any, ...], dashboard: bool | Sink | None, show_all_ranks: bool,
    node: int, local: int, devices: Sequence[str], backend: str, precision: str | None, in_process: bool,
    envs: list[LaunchEnvironment], limit: float | None, start: float, store: StoreServer | None,
) -> Any:
    """The launch once every argument was checked: show it, then run in this process or fork and supervise."""
    sink = GuardedSink(choose_sink(dashboard, show_all_ranks, main_rank=node * local))
    folder = None if in_process else create_run_folder(_function_name(function))
    sink.start(RunInfo(local, tuple(devices), "none" if in_process else backend, _function_name(function),
                       precision or "no", time.time(), "" if folder is None else display_path(folder)))
    if in_process:
        return run_in_process(function, args, envs[0], sink, limit, start)
    try:
        handles = start_workers(envs, max(1, hardware.cpu_count() // local), function, args,
                                inherited_fds=() if store is None else (store.fd,))
    except BaseException as e:
        finish_aborted(sink, e, time.monotonic() - start, "could not start the workers")
        raise
    return supervise(handles, sink, limit, start, log_dir=folder, before=None if store is None else store.start)
