"""The system monitor: process-tree CPU and memory, cgroup limits, NVML through a fake binding, the launcher's
samples, and an out-of-memory death explained with figures."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from notebook_accel import notebook_launcher
from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.launcher.supervision.failures import WorkerError
from notebook_accel.monitor import Nvml, SystemSampler, TreeMeter, memory_death_note
from notebook_accel.monitor import sampler as sampler_module
from notebook_accel.monitor.host import cgroup_memory
from notebook_accel.monitor.summary import SystemSummary, gib
from notebook_accel.widgets.system_panel import panel_html
from notebook_accel.widgets.system_state import SystemState
from tests.launcher.recording import RecordingSink
from tests.monitor import workers

GIB = 1024**3


class FakeNvml:
    """A stand-in for the pynvml module: two GPUs, the second without power readings."""

    NVML_TEMPERATURE_GPU = 0

    class NotSupported(Exception):
        pass

    def __init__(self) -> None:
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return int(uuid[-1])

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake H100"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * GIB, used=(10 + h) * GIB, free=(70 - h) * GIB)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=90 - 60 * h, memory=10)

    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 60 + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise self.NotSupported()
        return 350_000


def test_nvml_reads_every_figure_and_unknown_ones_are_none() -> None:
    binding = FakeNvml()
    session = Nvml.open(binding)
    assert session is not None and binding.initialised
    gpus = session.physical_gpus()
    assert [(g.index, g.name, g.uuid, g.compute_capability) for g in gpus] == [
        (0, "Fake H100", "GPU-0", (9, 0)), (1, "Fake H100", "GPU-1", (9, 0))]
    first, second = session.read("GPU-0"), session.read("GPU-1")
    assert first is not None and second is not None
    assert (first.utilization, first.memory_used, first.temperature, first.power_watts) == (90.0, 10 * GIB, 60.0, 350.0)
    assert second.power_watts is None and second.utilization == 30.0
    session.close()
    assert not binding.initialised


def test_nvml_without_a_driver_is_none() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    assert Nvml.open(NoDriver()) is None


def test_the_sampler_reads_each_ranks_gpu_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    from notebook_accel.hardware import GpuInfo

    visible = [GpuInfo(0, "Fake", 80 * GIB, (9, 0), "GPU-1"), GpuInfo(1, "Fake", 80 * GIB, (9, 0), "GPU-0")]
    monkeypatch.setattr(sampler_module.hardware, "detect_gpus", lambda: visible)  # CUDA_VISIBLE_DEVICES=1,0
    session = Nvml.open(FakeNvml())
    sampler = SystemSampler({0: os.getpid(), 1: os.getpid()}, {0: "cuda:0", 1: "cuda:1"}, nvml=session)
    sample = sampler.sample()
    by_rank = {r.rank: r for r in sample.ranks}
    assert by_rank[0].gpu_utilization == 30.0 and by_rank[1].gpu_utilization == 90.0  # cuda:0 is physical GPU 1
    assert by_rank[0].gpu_peak_memory == 11 * GIB and by_rank[0].gpu_power_watts is None
    assert by_rank[1].gpu_temperature == 60.0 and by_rank[1].gpu_memory_total == 80 * GIB


def test_a_tree_meter_counts_children() -> None:
    import subprocess
    import sys

    meter = TreeMeter(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "x = bytearray(200 << 20); import time; t = time.time()\n"
                              "while time.time() - t < 1.5: pass"])
    try:
        time.sleep(1.0)
        cpu, rss, _ = meter.read()
    finally:
        child.wait()
    assert rss > 200 << 20  # the child's 200 MB count as ours
    assert cpu > 5.0  # the child kept a core busy (a share of one on a loaded machine)


def _sample(rss: int, available: int, total: int, limit: int | None = None, group: int | None = None) -> SystemSample:
    return SystemSample(time.time(), (RankSystem(1, 0.0, rss, rss, memory_limit=limit, memory_group_usage=group),),
                        available, total)


_FAKE_COMPILE_WORKER = """
import os, sys, time
held = bytearray(200 << 20); held[::4096] = b"x" * len(held[::4096])  # the side process: 200 MiB
if os.fork() == 0:  # one pool worker, forked as torch's SubprocPool forks its workers
    more = bytearray(100 << 20); more[::4096] = b"x" * len(more[::4096])
    time.sleep(30)
    os._exit(0)
sys.stdout.write("ready\\n"); sys.stdout.flush()
time.sleep(30)
"""


def test_a_tree_meter_bills_torchs_compile_workers_apart(tmp_path: Path) -> None:
    import subprocess
    import sys

    entry = tmp_path / "torch" / "_inductor" / "compile_worker" / "__main__.py"  # the script torch starts
    entry.parent.mkdir(parents=True)
    entry.write_text(_FAKE_COMPILE_WORKER)
    meter = TreeMeter(os.getpid())
    before = meter.read().rss_bytes
    side = subprocess.Popen([sys.executable, str(entry), "--kind=fork", f"--parent={os.getpid()}"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert side.stdout is not None and side.stdout.readline() == "ready\n"
        time.sleep(0.3)  # the forked worker fills its 100 MiB
        reading = meter.read()
    finally:
        for child in psutil.Process(side.pid).children():
            child.kill()
        side.kill()
        side.wait()
    assert reading.compiler_rss_bytes > 300 << 20, reading  # the side process and its forked worker
    assert reading.rss_bytes < before + (50 << 20), (before, reading)  # none of it is the rank's own


def test_a_tree_meter_bills_the_cpp_compiler_apart(tmp_path: Path) -> None:
    import subprocess
    import sys

    compiler = tmp_path / "cc1plus"  # what g++ runs to compile a kernel inductor wrote (its name is the kernel's)
    compiler.symlink_to(sys.executable)
    meter = TreeMeter(os.getpid())
    before = meter.read().rss_bytes
    child = subprocess.Popen([str(compiler), "-c", "import sys, time; held = bytearray(300 << 20); "
                              "held[::4096] = b'x' * len(held[::4096]); print('ready', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        reading = meter.read()
    finally:
        child.kill()
        child.wait()
    assert reading.compiler_rss_bytes > 300 << 20 and reading.rss_bytes < before + (50 << 20), (before, reading)


def test_memory_deaths_are_blamed_on_memory_only_with_evidence() -> None:
    assert memory_death_note(None, 1) is None
    assert memory_death_note(_sample(1 * GIB, 20 * GIB, 24 * GIB), 1) is None  # plenty left: no guess
    assert memory_death_note(_sample(1 * GIB, 20 * GIB, 24 * GIB), 0) is None  # no figures for that rank
    note = memory_death_note(_sample(13 * GIB, 1 * GIB, 24 * GIB), 1)
    assert note is not None and "out-of-memory killer" in note and "13.00 GiB" in note and "24.0 GiB" in note
    in_group = memory_death_note(_sample(GIB // 4, 20 * GIB, 24 * GIB, limit=GIB // 3, group=GIB // 3 - 1), 1)
    assert in_group is not None and "cgroup" in in_group and "0.33 GiB limit" in in_group
    assert memory_death_note(_sample(GIB // 10, 20 * GIB, 24 * GIB, limit=GIB, group=GIB // 5), 1) is None


@pytest.mark.timeout(120)
def test_a_launch_hands_the_sink_samples_of_every_rank() -> None:
    sink = RecordingSink()
    notebook_launcher(workers.busy, (2.5,), num_processes=2, dashboard=sink)
    samples = sink.of_type(SystemSample)
    assert len(samples) >= 2  # about one a second
    last = samples[-1]
    assert isinstance(last, SystemSample) and {r.rank for r in last.ranks} == {0, 1}
    assert all(r.rss_bytes > 16 << 20 and r.peak_rss_bytes >= r.rss_bytes for r in last.ranks)
    assert any(r.cpu_percent > 20 for s in samples for r in s.ranks)  # type: ignore[attr-defined]
    assert 0 < last.host_available <= last.host_total


@pytest.fixture
def small_memory_cgroup() -> Iterator[Path]:
    """A memory cgroup (v1 or v2) limited to 160 MiB under this process's own, or a skip."""
    own = next((line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()
                if "memory" in line.split(":", 2)[1].split(",")), None)
    if own is None:
        pytest.skip("no cgroup v1 memory controller here")
    folder = Path("/sys/fs/cgroup/memory") / own[2].lstrip("/") / f"notebook-accel-test-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / "memory.limit_in_bytes").write_text(str(160 << 20))
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup here ({e}); needs root and a writable cgroup file system")
    try:
        yield folder
    finally:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.timeout(120)
def test_a_worker_killed_for_memory_gets_an_error_with_the_figures(small_memory_cgroup: Path) -> None:
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(workers.grow_in_cgroup, (str(small_memory_cgroup / "cgroup.procs"),), num_processes=2,
                          dashboard=False, timeout=60)
    message = str(caught.value)
    assert "rank 1" in message and "SIGKILL" in message and "out-of-memory killer" in message
    assert "memory cgroup" in message and "0.16 GiB limit" in message


@pytest.mark.timeout(180)
def test_torchs_compile_workers_memory_is_the_compilers_never_the_ranks() -> None:
    # the issue: during torch.compile the compile workers' memory was billed to the rank ("peak 3.3 GiB" on rank 1)
    sink = RecordingSink()
    notebook_launcher(workers.compile_pool_holds, (400, 4.0), num_processes=2, dashboard=sink)
    samples = [s for s in sink.of_type(SystemSample) if isinstance(s, SystemSample)]
    compiler = {rank: max(r.compiler_rss_bytes for s in samples for r in s.ranks if r.rank == rank) for rank in (0, 1)}
    peak = {rank: max(r.peak_rss_bytes for s in samples for r in s.ranks if r.rank == rank) for rank in (0, 1)}
    assert abs(peak[0] - peak[1]) < 150 << 20, peak  # the ranks' own memory: alike, none of the compiler's in it
    assert compiler[0] > 400 << 20 and compiler[1] == 0, compiler  # torch's pool, with the 400 MiB its worker held
    summary = SystemSummary()
    for sample in samples:
        summary.add(sample)
    line0, line1 = summary.lines()
    assert f"peak memory {gib(peak[0])} (+ compiler {gib(compiler[0])})" in line0 and "compiler" not in line1
    state = SystemState()
    for sample in samples:
        state.apply(sample)
    html = panel_html(state, final=True)
    assert html.count("+ compiler</span>") == 1 and f"peak {compiler[0] / GIB:.1f}" in html


def test_cgroup_memory_of_this_process_is_a_limit_or_none() -> None:
    limit, usage = cgroup_memory(os.getpid())
    assert limit is None or (limit > 0 and (usage is None or usage >= 0))


@pytest.mark.timeout(120)
def test_a_device_out_of_memory_error_carries_the_remedies() -> None:
    with pytest.raises(WorkerError) as caught:
        notebook_launcher(workers.device_out_of_memory, num_processes=2, dashboard=False)
    message = str(caught.value)
    assert "CUDA out of memory" in message and "gradient_accumulation_steps" in message and "FSDP" in message


def test_a_device_memory_note_gives_the_peak_when_sampled() -> None:
    from notebook_accel.monitor import device_memory_note

    gpu = RankSystem(1, 0.0, 0, 0, gpu_memory_used=70 * GIB, gpu_memory_total=80 * GIB, gpu_peak_memory=79 * GIB)
    note = device_memory_note(SystemSample(time.time(), (gpu,), GIB, 2 * GIB), 1)
    assert note.startswith("rank 1's GPU held up to 79.0 GiB of its 80.0 GiB") and "bf16" in note
    assert device_memory_note(None, 1).startswith("The device ran out of memory")


class _FakeEvent:
    """A CUDA timing event stand-in: recorded at ``at`` ms, complete or not."""

    def __init__(self, at: float, done: bool = True) -> None:
        self.at, self.done = at, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: _FakeEvent) -> float:
        return other.at - self.at


def test_gpu_collectives_are_read_back_once_complete_and_overlaps_count_once() -> None:
    from notebook_accel.monitor.collectives import CommTimer

    timer = CommTimer()
    timer.add_events(_FakeEvent(100.0), _FakeEvent(300.0))  # all-gather stream: 200 ms
    timer.add_events(_FakeEvent(250.0), _FakeEvent(400.0))  # reduce-scatter stream, overlapping by 50 ms
    pending = _FakeEvent(900.0, done=False)
    timer.add_events(_FakeEvent(800.0), pending)  # still running: read at a later take
    assert timer.take() == pytest.approx(0.3)
    pending.done = True
    assert timer.take() == pytest.approx(0.1)
    assert timer.take() == 0.0
