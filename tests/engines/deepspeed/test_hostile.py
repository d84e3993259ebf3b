"""DeepSpeed checkpoints that do not fit or were crafted are refused before anything changes, bit for bit (the
weights and the ZeRO optimizer's state on every rank), and without running code from the files."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from notebook_accel import notebook_launcher
from tests.checkpointing.hostile import CodeRunning, record, torch_bytes
from tests.engines.deepspeed import needs_deepspeed, workers

pytestmark = needs_deepspeed


ROOT = Path(__file__).resolve().parents[3]


def launch(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``function`` on 2 CPU processes; rank 0's result."""
    return notebook_launcher(functools.partial(function, *args, **kwargs), (), num_processes=2, dashboard=False,
                             use_cpu=True)


_ONE_PROCESS = """
import json, sys
from tests.engines.deepspeed import workers
print(json.dumps(workers.load_refused({"zero_stage": 2}, sys.argv[1], 1, allow_world_size_change=True)))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """A ZeRO-2 and a ZeRO-3 checkpoint of TinyNet after 2 steps (copied per test by ``copy``)."""
    root = tmp_path_factory.mktemp("zero")
    out = {}
    for stage in (2, 3):
        out[stage] = root / f"zero{stage}"
        launch(workers.resume, {"zero_stage": stage}, str(out[stage]), False, 2, 0)
    return out


def copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _assert_refused(out: dict[str, Any], *texts: str) -> None:
    assert out["error"].startswith("CheckpointError"), out["error"]
    for text in texts:
        assert text in out["error"], out["error"]
    assert "nothing was modified" not in out["error"] or "partially restored" not in out["error"]
    assert out["unchanged"], out


@pytest.mark.timeout(300)
def test_zero2_into_another_number_of_processes_is_refused_first(saved: dict[int, Path], tmp_path: Path) -> None:
    directory = copy(saved[2], tmp_path)
    done = subprocess.run([sys.executable, "-c", _ONE_PROCESS, str(directory)], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)  # DeepSpeed's one-process group stays for the life of the process
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    _assert_refused(out, "the checkpoint was saved by 2 process(es), this run has 1: model 0 (TinyNet): DeepSpeed "
                         "cannot load ZeRO stage 2 optimizer partitions into another number of processes")


@pytest.mark.timeout(300)
def test_zero3_checkpoint_with_an_extra_layer_is_refused_first(tmp_path: Path) -> None:
    directory = tmp_path / "aux"
    launch(workers.resume, {"zero_stage": 3}, str(directory), False, 2, 0, aux=True)
    out = launch(workers.load_refused, {"zero_stage": 3}, str(directory), 1)
    _assert_refused(out, "the checkpoint does not fit this model and optimizer: keys differ (missing in the "
                         "checkpoint: [], unexpected: ['aux.bias', 'aux.weight'])")


_WIDER_PARTITION = """
import sys, torch
state = torch.load(sys.argv[1], weights_only=False)  # the test's own file; this imports deepspeed (not in pytest)
groups = state["optimizer_state_dict"]["single_partition_of_fp32_groups"]
groups[0] = torch.cat([groups[0], torch.zeros(64)])  # a partition of another layout
torch.save(state, sys.argv[1])
"""


@pytest.mark.timeout(300)
def test_another_zero_partition_layout_is_refused_first(saved: dict[int, Path], tmp_path: Path) -> None:
    directory = copy(saved[2], tmp_path)
    name = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    subprocess.run([sys.executable, "-c", _WIDER_PARTITION, str(directory / name)], cwd=ROOT, check=True,
                   capture_output=True, timeout=240)
    record(directory, name)
    out = launch(workers.load_refused, {"zero_stage": 2}, str(directory), 1)
    _assert_refused(out, "rank 1: model 0 (TinyNet): the checkpoint does not fit this model and optimizer: the ZeRO "
                         "flat fp32 partition sizes are [2306] in the checkpoint, [2242] here")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("stage", "name"), [(2, "mp_rank_00_model_states.pt"),
                                             (2, "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                                             (3, "zero_pp_rank_1_mp_rank_00_model_states.pt")])
def test_a_deepspeed_file_that_would_run_code_is_refused(saved: dict[int, Path], tmp_path: Path, stage: int,
                                                         name: str) -> None:
    directory = copy(saved[stage], tmp_path)
    marker = tmp_path / "ran"
    (directory / name).write_bytes(torch_bytes({"module": CodeRunning(str(marker))}))
    record(directory, name)
    out = launch(workers.load_refused, {"zero_stage": stage}, str(directory), 1)
    assert not marker.exists(), "the checkpoint ran code"
    _assert_refused(out, f"{name} cannot be read as plain data", "since DeepSpeed would unpickle it in full")
