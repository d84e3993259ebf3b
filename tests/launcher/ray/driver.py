"""A "kernel" for the Ray tests: ``python -m tests.launcher.ray.driver CASE ADDRESS [ARG]``, printing ``RESULT {json}``.

Each case joins the test cluster at ADDRESS, launches through ``notebook_launcher(cluster=...)``, and reports what
happened and what the run left on the cluster (live actors of this job, placement groups not removed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def _join(address: str) -> Any:
    import ray

    ray.init(address=address, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "NOTEBOOK_ACCEL_LOG_DIR": "off"}})
    return ray


def leftovers(ray: Any, wait: float = 20.0) -> dict[str, Any]:
    """This job's actors still alive and its placement groups not removed (waiting up to ``wait`` for them to go)."""
    job = ray.get_runtime_context().get_job_id()
    deadline = time.monotonic() + wait
    while True:
        actors = [a["ActorID"] for a in ray._private.state.actors().values()
                  if a.get("JobID") == job and a.get("State") != "DEAD"]
        groups = [g for g, info in ray.util.placement_group_table().items() if info.get("state") != "REMOVED"]
        if (not actors and not groups) or time.monotonic() > deadline:
            return {"actors": actors, "groups": groups}
        time.sleep(0.5)


def _error(call: Any) -> dict[str, Any]:
    """Run ``call``; its error's type, text and how long it took."""
    start = time.monotonic()
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - the test looks at which
        return {"type": type(e).__name__, "text": str(e), "seconds": time.monotonic() - start}
    return {"type": None, "text": "", "seconds": time.monotonic() - start}


def fail_on_rank_one() -> None:
    """Rank 1 raises after the group formed."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    accelerator.wait_for_everyone()
    if accelerator.process_index == 1:
        raise ValueError("rank one's own failure")
    time.sleep(60)


def sleep_forever(pidfile: str = "") -> None:
    """Write this worker's pid and node to ``pidfile`` (one line per rank), then sleep."""
    if pidfile:
        with open(pidfile, "a") as f:
            f.write(f"{os.environ['RANK']} {os.getpid()}\n")
    while True:
        time.sleep(1)


def reduce_and_sleep(pidfile: str) -> None:
    """Every rank sums a tensor with the others every 0.2 s (a training loop's collectives), after writing its pid:
    a peer that vanishes shows in the others as their backend's lost connection, the race a lost node starts."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator()
    with open(pidfile, "a") as f:
        f.write(f"{accelerator.process_index} {os.getpid()}\n")
    step = 0
    while True:
        step += 1
        total = accelerator.reduce(torch.ones(1), reduction="sum")
        print(f"rank {accelerator.process_index} step {step} sum {total.item():g}", flush=True)
        time.sleep(0.2)


def first_step() -> int:
    """Form the group and take one collective step: a launch's time to its first step."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator()
    return int(accelerator.reduce(torch.ones(1), reduction="sum").item())


def _strangers(address: tuple[str, int]) -> list[Any]:
    """5 silent and 5 garbage connections to the run's back-channel listener, as anyone on the network can open."""
    import socket

    opened = []
    for index in range(10):
        sock = socket.create_connection(address, timeout=5)
        if index >= 5:
            sock.sendall(os.urandom(200 if index % 2 else 7))
        opened.append(sock)
    return opened


def case_strangers(ray: Any, cluster: Any) -> dict[str, Any]:
    """Time to the first step alone and with strangers dialling the listener as it opens (2 each, alternating)."""
    from notebook_accel import notebook_launcher
    from notebook_accel.launcher.placement.ray import placement

    opened: list[Any] = []

    class Crowded(placement.BackChannel):  # type: ignore[misc, valid-type]
        def __init__(self, host: str, secret: bytes | None = None) -> None:
            super().__init__(host, secret)
            opened.extend(_strangers(self.address))

    times: dict[str, list[float]] = {"alone": [], "crowded": []}
    plain = placement.BackChannel
    for kind in ("alone", "crowded", "alone", "crowded"):
        placement.BackChannel = Crowded if kind == "crowded" else plain  # type: ignore[misc]
        start = time.monotonic()
        assert notebook_launcher(first_step, num_processes=2, cluster=cluster, dashboard=False) == 2
        times[kind].append(time.monotonic() - start)
    placement.BackChannel = plain  # type: ignore[misc]
    for sock in opened:
        sock.close()
    return {"times": times, "strangers": len(opened), "left": leftovers(ray)}


def sealed(out: str) -> tuple[bool, str]:
    """Rank 0 writes where its node serves the rendezvous store to OUT.where, then both ranks run the multi-machine
    test's secret keeper (rank 0 stores a key, waits for an outsider's probe, reads it back)."""
    from tests.distributed.multinode_entry import keeps_a_secret

    if os.environ["RANK"] == "0":
        with open(f"{out}.where", "w") as f:
            json.dump([os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])], f)
    return keeps_a_secret(out)


def case_sealed(ray: Any, cluster: Any, out: str) -> dict[str, Any]:
    from notebook_accel import notebook_launcher

    value = notebook_launcher(sealed, args=(out,), num_processes=2, cluster=cluster, dashboard=False)
    return {"value": value, "left": leftovers(ray)}


class _Epoch:
    """The epoch a checkpoint was saved after (registered for checkpointing)."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = int(state["value"])


def train_with_checkpoints(folder: str, marker: str, epochs: int = 3) -> dict[str, Any]:
    """Train a fixed model 3 epochs, saving a checkpoint after each. With ``marker``, the first attempt writes it
    after its first checkpoint and then waits (for the test to take a node away); a restart resumes from the last
    checkpoint and finishes. Returns the weights, the restart count and where it resumed from."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_accel import Accelerator, ProjectConfiguration

    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=folder,
                                                                  automatic_checkpoint_naming=True))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    epoch = _Epoch()
    accelerator.register_for_checkpointing(epoch)
    if accelerator.restart_count:
        accelerator.load_state()
    for current in range(epoch.value, epochs):
        for x, y in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        epoch.value = current + 1
        accelerator.save_state()
        if marker and accelerator.restart_count == 0:
            if accelerator.is_main_process:
                with open(marker, "w") as f:
                    f.write("checkpoint_0 saved")
            while True:  # the test takes a node away now
                time.sleep(0.5)
    weights = [p.detach().tolist() for p in accelerator.unwrap_model(model).parameters()]
    return {"weights": weights, "restart_count": accelerator.restart_count, "resume_from": accelerator.resume_from}


def case_restart(ray: Any, cluster: Any, folder: str, marker: str, reserve_timeout: str) -> dict[str, Any]:
    """A run with max_restarts=1 (the test kills a node after the first checkpoint), then, with ``marker`` empty,
    the same training uninterrupted in a fresh folder."""
    from dataclasses import replace

    from notebook_accel import notebook_launcher

    cluster = replace(cluster, reserve_timeout=float(reserve_timeout))
    start = time.time()
    try:
        value: Any = notebook_launcher(train_with_checkpoints, args=(folder, marker), num_processes=2,
                                       cluster=cluster, dashboard=False, max_restarts=1)
        error: dict[str, Any] = {"type": None, "text": ""}
    except BaseException as e:  # noqa: BLE001 - the test looks at which
        value, error = None, {"type": type(e).__name__, "text": str(e)}
    ended = time.time()
    plain = None
    if value is not None:
        plain = notebook_launcher(train_with_checkpoints, args=(folder + "-uninterrupted", ""), num_processes=2,
                                  cluster=cluster, dashboard=False)
    return {"value": value, "error": error, "started_at": start, "ended_at": ended, "uninterrupted": plain,
            "left": leftovers(ray)}


def who_runs(value: int) -> dict[str, int]:
    """The value given, this rank's process and its parent (the actor that forked it)."""
    return {"value": value, "pid": os.getpid(), "actor": os.getppid()}


def _timed(call: Any) -> tuple[Any, float]:
    start = time.monotonic()
    value = call()
    return value, time.monotonic() - start


def case_warm(ray: Any, cluster: Any) -> dict[str, Any]:
    """Launches that reuse the workers the last one left warm: how long each takes against a local launch from the
    same kernel, what the kernel keeps meanwhile, and that nothing of one run reaches the next."""
    from dataclasses import replace

    from notebook_accel import notebook_launcher, ray_leftovers, release_ray_workers
    from tests.distributed import workers

    warm = replace(cluster, keep_warm=60.0)

    def on_ray(function: Any, *args: Any) -> Any:
        return notebook_launcher(function, args=args, num_processes=2, cluster=warm, dashboard=False)

    def here(function: Any, *args: Any) -> Any:
        return notebook_launcher(function, args=args, num_processes=2, dashboard=False)

    cold_train = on_ray(workers.train, 2, 1, 24)  # fresh actors
    warm_train = on_ray(workers.train, 2, 1, 24)  # the same actors, a fresh child each
    first, second = on_ray(who_runs, 1), on_ray(who_runs, 2)  # a changed argument is honoured
    kept = ray_leftovers()
    release_ray_workers()
    _, cold_ray = _timed(lambda: on_ray(first_step))
    warm_ray = [_timed(lambda: on_ray(first_step))[1] for _ in range(3)]
    here(first_step)  # the kernel's own warm-up
    warm_local = [_timed(lambda: here(first_step))[1] for _ in range(3)]
    released = release_ray_workers()
    return {"cold_train": cold_train, "warm_train": warm_train, "first": first, "second": second, "kept": kept,
            "cold_ray": cold_ray, "warm_ray": warm_ray, "warm_local": warm_local, "released": released,
            "after_release": ray_leftovers(), "left": leftovers(ray)}


def case_train(ray: Any, cluster: Any) -> dict[str, Any]:
    from notebook_accel import notebook_launcher
    from tests.distributed import workers

    start = time.monotonic()
    value = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, cluster=cluster, dashboard=False)
    seconds = time.monotonic() - start
    failed = _error(lambda: notebook_launcher(fail_on_rank_one, num_processes=2, cluster=cluster, dashboard=False))
    return {"value": value, "seconds": seconds, "failed": failed, "left": leftovers(ray)}


def case_refusals(ray: Any, cluster: Any) -> dict[str, Any]:
    from notebook_accel import notebook_launcher
    from notebook_accel.cluster import RayCluster

    lock = threading.Lock()
    unpicklable = _error(lambda: notebook_launcher(sleep_forever, args=("", lock), num_processes=2, cluster=cluster,
                                                   dashboard=False))
    big = RayCluster(resources_per_worker={"CPU": 1}, placement="strict_spread")
    too_big = _error(lambda: notebook_launcher(sleep_forever, num_processes=3, cluster=big, dashboard=False))
    return {"unpicklable": unpicklable, "too_big": too_big, "left": leftovers(ray, wait=0.0)}


def case_stop(ray: Any, cluster: Any) -> dict[str, Any]:
    from notebook_accel import notebook_launcher

    timed_out = _error(lambda: notebook_launcher(sleep_forever, num_processes=2, cluster=cluster, dashboard=False,
                                                 timeout=20))
    after_timeout = leftovers(ray)
    timer = threading.Timer(20.0, lambda: os.kill(os.getpid(), signal.SIGINT))  # the stop button
    timer.start()
    interrupted = _error(lambda: notebook_launcher(sleep_forever, num_processes=2, cluster=cluster, dashboard=False))
    timer.cancel()
    after_interrupt = leftovers(ray)
    run = notebook_launcher(sleep_forever, num_processes=2, cluster=cluster, dashboard=False, block=False)
    deadline = time.monotonic() + 300
    while run.status != "running" and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3.0)  # the workers are in the function
    running = run.status
    from notebook_accel import ray_leftovers

    during = ray_leftovers()  # the package's own check (no ray[default]) sees the live run
    run.stop()
    stopped = _error(run.result)
    return {"timed_out": timed_out, "after_timeout": after_timeout, "interrupted": interrupted,
            "after_interrupt": after_interrupt, "background": {"was": running, "stopped": stopped},
            "left": leftovers(ray), "package_during": during, "package_after": ray_leftovers()}


def case_hang(ray: Any, cluster: Any, pidfile: str) -> dict[str, Any]:
    """A run that never ends by itself: the test kills a node, cuts its link, or kills this driver."""
    from notebook_accel import notebook_launcher

    error = _error(lambda: notebook_launcher(reduce_and_sleep, args=(pidfile,), num_processes=2, cluster=cluster,
                                             dashboard=False))
    return {"error": error, "ended_at": time.time(), "left": leftovers(ray, wait=30.0)}


def case_checkpoint(ray: Any, cluster: Any, root: str) -> dict[str, Any]:
    """Each rank saves into a folder of its own (a node-local disk) and resumes from it, on the cluster."""
    from notebook_accel import notebook_launcher
    from tests.checkpointing import workers

    value = notebook_launcher(workers.save_into_a_folder_per_rank, args=(root,), num_processes=2, cluster=cluster,
                              dashboard=False)
    return {"value": value, "left": leftovers(ray)}


class _Arrivals:
    """A sink that notes when each rank's metrics and output arrive in the kernel (``time.time()``, as the workers
    stamp their records: the namespaces share the machine's clock), and the first record's own time."""

    def __init__(self) -> None:
        self.metrics: list[tuple[float, float]] = []  # (arrived, logged) of each batch's first record
        self.lines: dict[int, int] = {}
        self.cpu: list[tuple[float, float]] = []  # (time.monotonic(), this process's CPU seconds) at each batch

    def _note(self, logged: float) -> None:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.metrics.append((time.time(), logged))
        self.cpu.append((time.monotonic(), usage.ru_utime + usage.ru_stime))

    def cpu_share(self) -> float:
        """The kernel's CPU (all its threads) as a share of one core while the metrics arrived (launch left out)."""
        if len(self.cpu) < 2 or self.cpu[-1][0] <= self.cpu[0][0]:
            return float("nan")
        return (self.cpu[-1][1] - self.cpu[0][1]) / (self.cpu[-1][0] - self.cpu[0][0])

    def start(self, info: Any) -> None:
        self.info = info

    def handle(self, event: Any) -> None:
        from notebook_accel.events import Log, Metrics

        if isinstance(event, Metrics):
            self._note(event.time)
        elif isinstance(event, Log) and not event.partial:
            self.lines[event.rank] = self.lines.get(event.rank, 0) + event.text.count("\n") + 1

    def handle_metrics(self, batch: Any) -> None:
        if len(batch.times):
            self._note(float(batch.times[0]))

    def finish(self, outcome: Any) -> None:
        self.outcome = outcome


def log_paced(rate: int, seconds: float) -> int:
    """Every rank logs ``rate`` records a second for ``seconds`` (paced by sleeping) and prints a line each 0.1 s."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    accelerator.wait_for_everyone()
    start, i = time.time(), 0
    while time.time() - start < seconds:
        due = int((time.time() - start) * rate)
        while i < due:
            accelerator.log({"train/loss": 1.0 / (i + 1), "t": time.time()}, step=i)
            i += 1
            if i % max(1, rate // 10) == 0:
                print(f"rank {accelerator.process_index} logged {i}", flush=True)
        time.sleep(0.001)
    accelerator.wait_for_everyone()
    return i


def case_relayed(ray: Any, cluster: Any) -> dict[str, Any]:
    """From a notebook off the cluster (Ray Client, nothing can dial it): a training run, a run that logs fast
    (when its curves and output arrive, and the kernel's CPU, against the same run forked here), and a stopped
    background run; what the package and the cluster say is left."""
    from dataclasses import replace

    from notebook_accel import notebook_launcher, ray_leftovers, release_ray_workers
    from tests.distributed import workers

    value = notebook_launcher(workers.train, args=(2, 1, 24), num_processes=2, cluster=cluster, dashboard=False)
    sink, here = _Arrivals(), _Arrivals()
    logged = notebook_launcher(log_paced, args=(1000, 4.0), num_processes=2, cluster=cluster, dashboard=sink)
    notebook_launcher(log_paced, args=(1000, 4.0), num_processes=2, dashboard=here)
    failed = _error(lambda: notebook_launcher(fail_on_rank_one, num_processes=2, cluster=cluster, dashboard=False))
    timed_out = _error(lambda: notebook_launcher(sleep_forever, num_processes=2, cluster=cluster, dashboard=False,
                                                 timeout=20))
    run = notebook_launcher(sleep_forever, num_processes=2, cluster=cluster, dashboard=False, block=False)
    deadline = time.monotonic() + 300
    while run.status != "running" and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3.0)
    during = ray_leftovers()
    stop_started = time.monotonic()
    run.stop()
    stopped = _error(run.result)
    stop_seconds = time.monotonic() - stop_started
    first = min(sink.metrics, key=lambda m: m[1]) if sink.metrics else (0.0, 0.0)
    warm = replace(cluster, keep_warm=60.0)
    _, cold = _timed(lambda: notebook_launcher(first_step, num_processes=2, cluster=warm, dashboard=False))
    warm_ray = [_timed(lambda: notebook_launcher(first_step, num_processes=2, cluster=warm, dashboard=False))[1]
                for _ in range(2)]
    warm_local = [_timed(lambda: notebook_launcher(first_step, num_processes=2, dashboard=False))[1]
                  for _ in range(3)][1:]
    release_ray_workers()
    return {"left_warm": ray_leftovers(), "cold": cold, "warm_ray": warm_ray, "warm_local": warm_local,"value": value, "logged": logged, "first_curve_lag": first[0] - first[1],
            "lags": sorted(a - b for a, b in sink.metrics), "lines": sink.lines,
            "relayed_cpu": sink.cpu_share(), "local_cpu": here.cpu_share(), "during": during, "stopped": stopped,
            "failed": failed, "timed_out": timed_out,
            "stop_seconds": stop_seconds, "after": ray_leftovers()}


def main(argv: list[str]) -> int:
    what, address = argv[0], argv[1]
    ray = _join(address)
    from notebook_accel.cluster import RayCluster

    from dataclasses import replace

    cluster = RayCluster(placement="spread", node_timeout=8.0, reserve_timeout=60.0, keep_warm=0.0)  # see case_warm
    if what == "alive":
        result: dict[str, Any] = {"alive": sum(1 for n in ray.nodes() if n.get("Alive"))}
    elif what == "leftovers":
        result = leftovers(ray, wait=0.0)
    elif what == "train":
        result = case_train(ray, cluster)
    elif what == "refusals":
        result = case_refusals(ray, cluster)
    elif what == "stop":
        result = case_stop(ray, cluster)
    elif what == "checkpoint":
        result = case_checkpoint(ray, cluster, argv[2])
    elif what == "warm":
        result = case_warm(ray, cluster)
    elif what == "restart":
        result = case_restart(ray, cluster, argv[2], argv[3], argv[4])
    elif what == "sealed":
        result = case_sealed(ray, cluster, argv[2])
    elif what == "strangers":
        result = case_strangers(ray, cluster)
    elif what == "relayed":
        result = case_relayed(ray, replace(cluster, address=address))
    elif what == "hang":
        result = case_hang(ray, cluster, argv[2])
    else:
        raise SystemExit(f"unknown case {what}")
    print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
