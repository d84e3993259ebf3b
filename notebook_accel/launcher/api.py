"""``notebook_launcher``: resolve the arguments, check everything before forking, then run and supervise."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from notebook_accel import hardware
from notebook_accel.cluster import Cluster, check_cluster, spec_of
from notebook_accel.config import Config, resolve_config
from notebook_accel.display.base import BaseSink
from notebook_accel.display.phases import launch_phase
from notebook_accel.display.sinks import GuardedSink
from notebook_accel.engines.label import config_engine
from notebook_accel.engines.registry import launch_value
from notebook_accel.errors import LaunchError, shown
from notebook_accel.events import RunInfo, Sink
from notebook_accel.launcher import accelerate_args, preflight
from notebook_accel.launcher.kernel.busy import kernel_stays_busy
from notebook_accel.launcher.kernel.warmup import warm_kernel, warming_needed
from notebook_accel.launcher.placement.inprocess import run_in_process
from notebook_accel.launcher.placement.local import LocalFork
from notebook_accel.launcher.placement.protocol import Placement
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.plan import Plan, cluster_devices, cluster_label, function_name
from notebook_accel.launcher.restarts import Restart
from notebook_accel.launcher.run_resources import RunResources, open_resources
from notebook_accel.launcher.sink_choice import choose_sink
from notebook_accel.launcher.supervision.background import BackgroundRun, RecordingTee, check_can_start
from notebook_accel.launcher.supervision.failures import WorkerError
from notebook_accel.launcher.supervision.outcome import finish_aborted
from notebook_accel.launcher.supervision.runlogs import create_run_folder, display_path, prune_runs_aside
from notebook_accel.launcher.supervision.supervisor import supervise
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


@user_facing
def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    mixed_precision: str | None = None,
    use_port: int | str | None = None,
    master_addr: str = _DEFAULT_ADDR,
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
    *,
    gpu_ids: str | int | Sequence[int] | None = None,
    timeout: float | None = None,
    config: Any = None,
    gradient_accumulation_steps: int | None = None,
    dashboard: bool | Sink | None = None,
    show_all_ranks: bool = False,
    use_cpu: bool | None = None,
    block: bool = True,
    concurrent: bool = False,
    cluster: str | Cluster | None = None,
) -> Any:
    """Run ``function(*args)`` on every device of this machine, forked from the live kernel; return rank 0's value.

    Each worker gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, its device and launch choices (read by the workers' ``Accelerator``), and
    ``cores / workers`` threads. Worker ``i`` uses visible CUDA device ``i`` (or ``gpu_ids[i]``) with nccl, or
    the CPU with gloo when no GPU is visible. ``num_processes=1`` runs in this process (no fork), unless
    ``timeout=``, ``block=False`` or ``max_restarts`` is given: then in one forked worker, so that stopping it
    never interrupts the kernel's own thread (no SIGALRM inside arbitrary code). Every
    argument left ``None`` comes from ``config`` (or the default config file), else the default.

    Each worker's whole output (stdout and stderr in the order written, as a terminal shows it) is kept in
    ``runs/<date>-<time>-<function>/rank<N>.log`` (the root is ``$NOTEBOOK_ACCEL_LOG_DIR``; ``off`` keeps none);
    the dashboard and the console say where. Errors raised here carry none of the launcher's frames.

    The positional order is accelerate's (``notebook_launcher(f, (), 2, "bf16")`` works); the options after
    ``log_line_prefix_template`` are ours and keyword-only.

    Args:
        function: the training function; any callable (lambdas and functions defined in the notebook work).
        args: positional arguments for ``function``.
        num_processes: processes on this machine; ``None``: one per visible GPU (else 1).
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"`` (torchao; refused here when it cannot
            run, see :func:`.preflight.check_fp8`); reaches every worker's ``Accelerator`` (``None``: from the config,
            else ``"no"``).
        use_port: rendezvous port (an int, or a string of digits as accelerate takes it); ``None`` picks a free
            one (single machine). A busy port is refused.
        master_addr: rendezvous address (node 0's address for several machines).
        gpu_ids: restrict this launch to these visible GPUs: ``"all"``, ``"0,2"``, ``[0, 2]``.
        timeout: seconds; a run still going then is stopped and :class:`LaunchTimeoutError` raised.
        config: a ``Config``, a YAML path, a config picker, or ``None`` for the default file (if any).
        gradient_accumulation_steps: reaches every worker's ``Accelerator``.
        node_rank: this machine's index, 0 to ``num_nodes - 1``.
        num_nodes: machines taking part (run the same call on each, with its ``node_rank``).
        rdzv_backend: ``"static"`` (the default: node 0 serves the rendezvous, node ranks as given) or
            ``"c10d"`` (accepted for accelerate's code: the same, with ``rdzv_endpoint`` naming node 0). Other
            backends (etcd) are refused.
        rdzv_endpoint: ``"host[:port]"`` of node 0; fills ``master_addr``/``use_port`` when those are not given.
        rdzv_conf: rendezvous options; ``join_timeout`` (seconds a worker waits for the others at the
            rendezvous, 1 to 604800, default 1800) and, with several nodes, ``keep_alive_interval`` (seconds
            between the nodes' heartbeats, default 5) and ``keep_alive_max_attempt`` (beats missed before a
            node counts as lost, default 3) are used; the others are accepted and ignored.
        rdzv_id: accepted for accelerate's code; a run here is identified by its log folder.
        max_restarts: restarts after a failure. A run restarts from the last checkpoint it committed with
            ``accelerator.save_state()``: the restarted workers see it as ``accelerator.resume_from`` and
            ``accelerator.load_state()`` loads it (``accelerator.restart_count`` counts restarts). A run that
            saved nothing restarts from the start, as accelerate's does. One machine only.
        monitor_interval: accepted for accelerate's code; the launcher here is woken by events, not polling.
        log_line_prefix_template: a prefix for other ranks' lines on the console, with ``{rank}`` and
            ``{local_rank}`` (torchrun's names ``${rank}``/``${local_rank}`` work too), at most 200 characters
            once filled; ``None``: ``[rank N] ``.
        dashboard: ``None`` (a live dashboard in Jupyter when ipywidgets is installed, else console output),
            ``True``, ``False`` (console), or any :class:`~notebook_accel.events.Sink`.
        show_all_ranks: show every rank's output, not only the main process's (others' errors always show).
        use_cpu: run on CPU with gloo even when GPUs are visible.
        block: ``False`` returns a :class:`~notebook_accel.launcher.supervision.background.BackgroundRun` at once
            while the run goes on (the dashboard keeps updating; other cells run): ``run.status``, ``run.wait()``,
            ``run.result()``, ``run.stop()``, ``run.metrics``, ``run.output``, ``await run``.
        concurrent: allow this launch while a background run is still going (one at a time otherwise).
        cluster: run the workers on a cluster instead of forking them here: a placement's name (``"ray"``: the
            Ray cluster this machine belongs to, or the one the kernel joined with ``ray.init``) or its request
            (:class:`~notebook_accel.cluster.RayCluster`: address, resources per worker, placement; see
            :mod:`notebook_accel.cluster`); ``num_processes`` workers are placed at once, ranks numbered node by
            node. ``None``: the config's ``cluster:``, else this machine.

    Returns:
        What ``function`` returned on rank 0 (``None`` on other nodes than node 0); with ``block=False``, the
        run's handle.

    Raises:
        LaunchError: a bad argument, a busy port, more processes than GPUs; nothing was started.
        CudaInitializedError: CUDA is already initialised in the kernel; restart the kernel.
        WorkerError: a worker raised or died; the others were stopped; names every failing rank.
        LaunchTimeoutError: the run took longer than ``timeout``.
        KeyboardInterrupt: the stop button; every worker was stopped first. With ``num_processes=1``, the
            function's own exception is raised unchanged.

    Example:
        >>> def train(lr):
        ...     import torch.distributed as dist
        ...     dist.init_process_group("gloo")
        ...     ...
        ...     return dist.get_rank()
        >>> notebook_launcher(train, args=(1e-3,), num_processes=2)   # doctest: +SKIP
        Launching 2 processes on CPU (gloo)
        Finished in 1.2s
        0
    """
    start = time.monotonic()
    preflight.check_callable(function)
    preflight.check_flag("show_all_ranks", show_all_ranks)
    preflight.check_flag("use_cpu", use_cpu, optional=True)
    preflight.check_flag("block", block)
    preflight.check_flag("concurrent", concurrent)
    check_can_start(concurrent)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise LaunchError(
            f"args={shown(args, 80)} is not allowed; pass a tuple of positional arguments, e.g. args=(lr,)")
    rdzv = accelerate_args.check_rendezvous(rdzv_backend, rdzv_endpoint, rdzv_conf, rdzv_id, monitor_interval)
    restarts = accelerate_args.check_max_restarts(max_restarts)
    prefix = accelerate_args.check_prefix_template(log_line_prefix_template)
    if rdzv.endpoint_host is not None and master_addr == _DEFAULT_ADDR:
        master_addr = rdzv.endpoint_host
    if rdzv.endpoint_port is not None and use_port is None:
        use_port = rdzv.endpoint_port
    resolved = resolve_config(config)
    engine = launch_value(resolved)  # distributed_type: FSDP / DEEPSPEED reaches the workers
    s = _settings(resolved, num_processes, gpu_ids, use_cpu, mixed_precision,
                  gradient_accumulation_steps, use_port, master_addr, num_nodes, node_rank)
    precision = preflight.check_mixed_precision(s.mixed_precision)
    steps = None if s.gradient_accumulation_steps is None else preflight.check_positive_int(
        "gradient_accumulation_steps", s.gradient_accumulation_steps)
    limit = preflight.check_timeout(timeout)
    preflight.check_master_addr(s.master_addr)
    nodes, node = preflight.check_nodes(s.num_nodes, s.node_rank, s.port, s.master_addr)
    if restarts and not block:
        raise LaunchError(
            f"max_restarts={restarts} with block=False is not supported: restarts fork new workers, which must happen "
            "in the cell's own thread; use block=True, or max_restarts=0 in the background"
        )
    if restarts and nodes > 1:
        raise LaunchError(
            f"max_restarts={restarts} with num_nodes={nodes}: restarts need every node to restart together, which "
            "this launcher does not coordinate; use max_restarts=0 here, or torchrun's elastic launch "
            "(notebook-accel launch --max_restarts) for several machines"
        )
    where = check_cluster(cluster if cluster is not None else getattr(resolved, "cluster", None))
    if where is not None:
        # gpu_ids and use_cpu as given: the config's describe this machine's devices
        devices, backend = cluster_devices(where, s.num_processes, gpu_ids, use_cpu, nodes)
        in_process = False
        fp8 = preflight.fp8_options(precision, resolved)  # each worker's Accelerator checks its own GPU there
    else:
        devices, backend = preflight.resolve_devices(s.num_processes, s.gpu_ids, s.use_cpu)
        fp8 = preflight.check_fp8(precision, resolved, devices, engine)
        # A timeout (or a restart) bounds a single process by running it in one forked worker: stopping a forked
        # process is safe, while interrupting the kernel's own thread could land inside an import and break it.
        in_process = len(devices) == 1 and nodes == 1 and limit is None and not restarts and block
        if backend == "nccl" and not in_process:
            preflight.refuse_if_cuda_initialized()
    plan = Plan(function=function, args=tuple(args), devices=devices, backend=backend, precision=precision, steps=steps,
                node=node, nodes=nodes, master_addr=s.master_addr, port=s.port, limit=limit, in_process=in_process,
                dashboard=dashboard, show_all_ranks=show_all_ranks, prefix=prefix, rdzv=rdzv, block=block,
                engine=engine, engine_label=config_engine(resolved, len(devices) * nodes), cluster=where,
                fp8=fp8)
    resume: str | None = None
    restart = Restart()
    for attempt in range(restarts + 1):
        try:
            return _attempt(plan, start, attempt, resume, restart)
        except WorkerError as e:
            resume = e.last_checkpoint or resume
            restart = restart.next(attempt + 1, restarts, resume, e)
            if attempt == restarts:
                raise e.with_attempts(restart.earlier) from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _attempt(plan: Plan, start: float, attempt: int, resume: str | None, restart: Restart) -> Any:
    """One run of the plan: open its resources (node 0 holds the store), show the run (and, after a failure, which
    restart this is, from where and why: ``restart``), then run in this process, or start the workers and watch them
    (here, or in a background thread with ``block=False``, which then owns the resources). Whatever happens, the
    resources are closed once, in reverse (:mod:`.run_resources`). A blocking run keeps the kernel's reported state
    busy (:mod:`.kernel.busy`)."""
    with open_resources(plan, attempt, resume) as resources, kernel_stays_busy() if plan.block else nullcontext():
        main_rank = plan.node * len(plan.devices)
        sink = GuardedSink(choose_sink(plan.dashboard, plan.show_all_ranks, main_rank=main_rank,
                                       prefix_template=plan.prefix))
        name = function_name(plan.function)
        folder = None if plan.in_process else create_run_folder(name, prune=False)  # pruned once forked
        sink.start(RunInfo(len(plan.devices), tuple(plan.devices), "none" if plan.in_process else plan.backend, name,
                           plan.precision or "no", time.time(), "" if folder is None else display_path(folder),
                           plan.engine_label, cluster_label(plan.cluster), restart.line,
                           f"{getattr(plan.function, '__module__', None) or ''}.{name}"))
        if plan.in_process:
            return run_in_process(plan.function, plan.args, resources.envs[0], sink, start)
        placement = _placement(plan, resources, sink, restart.cause)
        launch = functools.partial(_start_workers, plan, resources, placement, sink, folder, start)
        local = len(plan.devices)
        supervising = functools.partial(
            supervise, timeout=plan.limit, start_time=start, log_dir=folder, before=resources.serve,
            elsewhere=tuple(r for r in range(plan.nodes * local) if r // local != plan.node), watch=resources.watch,
            placement=placement)
        if plan.block:
            handles = launch()
            return supervising(handles, sink, board=resources.board)
        tee = RecordingTee(sink, main_rank)
        run = BackgroundRun(name, tee, launch, lambda handles, stop_fd: supervising(
            handles, tee, stop_fd=stop_fd, board=resources.board), resources)  # returns once the workers are forked
        if resources.descriptors is not None:
            resources.descriptors.sources.append(run.descriptors)  # its stop pipe: not for later runs' workers either
        return run


def _placement(plan: Plan, resources: RunResources, sink: BaseSink, restart_after: str = "") -> Placement:
    """Where the plan's workers run: forked here (after warming the kernel once), or by the placement of the plan's
    cluster (``restart_after``: the failure a restart follows, which a reservation that cannot be placed names)."""
    if plan.cluster is not None:  # imports the placement's modules, not yet its cluster's client library
        placement: Placement = spec_of(plan.cluster).placement(plan.cluster, resources.descriptors, restart_after)
        return placement
    warming = "importing torch's distributed modules in the kernel (once)" if warming_needed(plan.backend) else ""
    with launch_phase(sink, warming, ticking=True) if warming else nullcontext():
        warm_kernel(plan.backend, store=resources.store is not None)
    return LocalFork(threads=max(1, hardware.cpu_count() // len(plan.devices)), inherited_fds=resources.inherited_fds(),
                     store_folder=resources.private, descriptors=resources.descriptors, store_secret=resources.secret)


def _start_workers(plan: Plan, resources: RunResources, placement: Placement, sink: BaseSink, folder: Path | None,
                   start: float) -> list[WorkerHandle]:
    """Start the workers (in the thread that will watch them: see supervision/background.py), then guard them; tell
    ``sink`` when they could not be started."""
    envs = resources.envs
    try:
        board = resources.open_board([env.rank for env in envs])  # before the fork: the workers inherit it
        noun = "process" if len(envs) == 1 else "processes"
        where = spec_of(plan.cluster).starting if plan.cluster is not None else ""
        # a cluster's placement forks nothing from the kernel (Ray's client calls, srun through subprocess's exec),
        # so its clock may tick from a thread while it reserves: seconds on Ray; a local fork must not (no thread
        # may hold a lock while the kernel forks), and it takes milliseconds
        deadline = None if plan.limit is None else start + plan.limit  # a placement that waits keeps to it
        with launch_phase(sink, f"starting {len(envs)} worker {noun}{where}", ticking=plan.cluster is not None,
                          deadline=deadline):
            handles = placement.start(envs, plan.function, plan.args, board)
    except BaseException as e:
        finish_aborted(sink, e, time.monotonic() - start, "could not start the workers")
        raise
    resources.guard_workers(handles)
    pruning = prune_runs_aside(folder)  # while the run goes: old run folders cost the launch nothing
    if pruning is not None:
        resources.enter(pruning, threading.Thread.join)  # done before the run's end
    return handles
