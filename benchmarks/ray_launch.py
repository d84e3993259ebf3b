"""A run on a Ray cluster: time from the call to the first training step, and the step time, against Ray Train's
``TorchTrainer`` (the anchor: what Ray users run today) and a local fork launch (the step-time limit).

The same function trains the same DDP model in every contender: 2 workers x 1 CPU, gloo, a 256-512-512-256 MLP,
batch 64, ``--steps`` steps; it records the wall-clock time at the end of its first step and the per-step times after
a warm-up. ``TorchTrainer`` makes the process group itself; under ``notebook_launcher`` the function makes it (the
one line that differs). Contenders run in rotating order, each round:

- ``ray_cold``: ``notebook_launcher(train, num_processes=2, cluster=RayCluster(keep_warm=0))`` in this process:
  fresh actors every launch;
- ``ray_warm``: the same with the default ``keep_warm``: the actors the last launch left (one warm-up launch first);
- ``ray_warm_again``: the same (an A/A control: how much two identical runs differ here);
- ``torchtrainer``: ``TorchTrainer(train, scaling_config=ScalingConfig(num_workers=2))`` in this process;
- ``local_warm``: ``notebook_launcher(train, num_processes=2)`` twice in one fresh Python, the second timed: a warm
  local launch from a kernel (a fresh one, not this process, which joined Ray).

Prints each contender's median first-step time and step time, and the ratios. Needs ``ray[train]`` (the
benchmark only: the ``ray`` extra installs Ray core). Starts a local Ray with ``num_cpus=2`` unless ``--address``.

Usage: ``python benchmarks/ray_launch.py [--rounds N] [--steps N] [--address ADDR]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def train(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train the MLP; the first step's end (wall clock) and the steps' durations (ms) after the warm-up."""
    import torch
    import torch.distributed as dist

    steps = int((config or {}).get("steps", 60))
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 256)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 256)
    first = 0.0
    durations = []
    for step in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if step == 0:
            first = time.time()
        elif step >= 5:
            durations.append((time.perf_counter() - start) * 1000)
    result = {"first_step_at": first, "step_ms": statistics.median(durations)}
    report = (config or {}).get("report")
    if report and dist.get_rank() == 0:  # TorchTrainer keeps no return value: rank 0 leaves it in a file
        Path(report).write_text(json.dumps(result))
    return result


def ours(cluster: Any, steps: int) -> dict[str, float]:
    """``notebook_launcher`` on the cluster."""
    from notebook_accel import notebook_launcher

    called = time.time()
    result = notebook_launcher(train, args=({"steps": steps},), num_processes=2, cluster=cluster, dashboard=False)
    return {"first_step_s": result["first_step_at"] - called, "step_ms": result["step_ms"]}


def torchtrainer(steps: int, storage: str) -> dict[str, float]:
    """Ray Train's ``TorchTrainer`` with the same function and workers (rank 0's figures come back in a file)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    report = os.path.join(storage, f"result-{time.time_ns()}.json")
    called = time.time()
    trainer = TorchTrainer(train, train_loop_config={"steps": steps, "report": report},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                                        resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(storage_path=storage, name=f"bench{time.time_ns()}"))
    outcome = trainer.fit()
    metrics = getattr(outcome, "return_value", None) or json.loads(Path(report).read_text())  # Ray Train v2, v1
    return {"first_step_s": metrics["first_step_at"] - called, "step_ms": metrics["step_ms"]}


def local_warm(steps: int) -> dict[str, float]:
    """``notebook_launcher`` forking 2 workers, twice in a fresh Python; the second (warm) launch's figures."""
    code = ("import json, sys, time; sys.path.insert(0, sys.argv[1]); from benchmarks.ray_launch import train; "
            "from notebook_accel import notebook_launcher; args = ({'steps': int(sys.argv[2])},); "
            "notebook_launcher(train, args=args, num_processes=2, dashboard=False); t = time.time(); "
            "r = notebook_launcher(train, args=args, num_processes=2, dashboard=False); "
            "print('RESULT', json.dumps({'first_step_s': r['first_step_at'] - t, 'step_ms': r['step_ms']}))")
    env = {**os.environ, "NOTEBOOK_ACCEL_LOG_DIR": "off"}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), str(steps)], capture_output=True, text=True,
                         env=env, check=True).stdout
    return dict(json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--address", default=None, help="a running cluster (default: a local Ray, num_cpus=2)")
    args = parser.parse_args()
    try:
        import ray
        import ray.train  # noqa: F401
    except ImportError:
        print("needs ray[train] (pip install 'ray[train]'): the anchor is Ray Train's TorchTrainer; nothing measured")
        return 0
    from notebook_accel import RayCluster

    os.environ.setdefault("NOTEBOOK_ACCEL_LOG_DIR", "off")
    if args.address:
        ray.init(address=args.address, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}})
    else:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}})
    placement = "spread" if args.address else "pack"
    cold = RayCluster(resources_per_worker={"CPU": 1}, placement=placement, keep_warm=0)
    warm = RayCluster(resources_per_worker={"CPU": 1}, placement=placement)
    storage = tempfile.mkdtemp(prefix="ray-bench-")

    def warmed() -> dict[str, float]:  # the warm workers may have gone to another contender: warm them again
        from notebook_accel.launcher.placement.ray import warm as kept

        if not kept.kept():
            ours(warm, 6)
        return ours(warm, args.steps)

    def fresh() -> dict[str, float]:  # the warm workers hold the CPUs the cold run needs: give them back first
        from notebook_accel import release_ray_workers

        release_ray_workers()
        return ours(cold, args.steps)

    def trainer() -> dict[str, float]:
        from notebook_accel import release_ray_workers

        release_ray_workers()
        return torchtrainer(args.steps, storage)

    contenders = {
        "ray_cold": fresh,
        "ray_warm": warmed,
        "ray_warm_again": warmed,
        "torchtrainer": trainer,
        "local_warm": lambda: local_warm(args.steps),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            results[name].append(contenders[name]())
            print(f"round {r} {name:15s} first step {results[name][-1]['first_step_s']:6.2f} s, "
                  f"step {results[name][-1]['step_ms']:6.2f} ms", flush=True)
    med = {n: {k: statistics.median(x[k] for x in v) for k in ("first_step_s", "step_ms")} for n, v in results.items()}
    for name, m in med.items():
        print(f"{name:15s} median first step {m['first_step_s']:6.2f} s, step {m['step_ms']:6.2f} ms "
              f"({args.rounds} rounds of {args.steps} steps)")
    def ratio(a: str, b: str, key: str = "first_step_s") -> float:
        return med[a][key] / med[b][key]

    print(f"first step: warm on Ray / warm local {ratio('ray_warm', 'local_warm'):.2f}x (goal <= 1.5x), "
          f"cold on Ray / TorchTrainer {ratio('ray_cold', 'torchtrainer'):.2f}x, "
          f"warm on Ray / TorchTrainer {ratio('ray_warm', 'torchtrainer'):.3f}x "
          f"(A/A {ratio('ray_warm_again', 'ray_warm'):.2f}x)")
    print(f"step time: warm on Ray / local {ratio('ray_warm', 'local_warm', 'step_ms'):.3f}x, "
          f"TorchTrainer / local {ratio('torchtrainer', 'local_warm', 'step_ms'):.3f}x "
          f"(A/A {ratio('ray_warm_again', 'ray_warm', 'step_ms'):.3f}x)")
    from notebook_accel import release_ray_workers

    release_ray_workers()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
