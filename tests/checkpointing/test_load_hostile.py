"""Crafted checkpoints (consistent manifest, hostile content) are refused before any state changes, bit for bit.

Each case rewrites one file of a good checkpoint and records its new size and checksum in the manifest, so only the
content checks can catch it; load_state must then raise a CheckpointError and leave the weights (as bytes), the
optimizer, scheduler, loader, custom object, step and every RNG (python, numpy, torch) exactly as they were.
(The basic cases, one per kind of problem, are in test_load.py; these are the ones that slipped past them.)
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, load_state, save_state
from notebook_accel.checkpointing.manifest import MANIFEST_NAME
from tests.checkpointing.fakes import FakeAccelerator, fingerprint, make_accelerator, train_step
from tests.checkpointing.hostile import CodeRunning, record, torch_bytes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def saved(tmp_path) -> str:
    acc = make_accelerator(seed=0)
    train_step(acc)
    train_step(acc)
    return save_state(acc, tmp_path / "ckpt")


def _everything(acc: FakeAccelerator) -> dict[str, Any]:
    """All state a load could change, bit for bit."""
    return {
        **fingerprint(acc),
        "weights_bytes": [p.detach().numpy().tobytes() for p in acc._models[0].parameters()],
        "python": random.getstate(),
        "numpy": repr(np.random.get_state()),
        "torch": torch.get_rng_state().tolist(),
    }


def _refused(path: str, pattern: str) -> None:
    """load_state into a trained Accelerator raises ``pattern`` and changes nothing."""
    acc = make_accelerator(seed=5)
    train_step(acc)
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    before = _everything(acc)
    with pytest.raises(CheckpointError, match=pattern):
        load_state(acc, path)
    assert _everything(acc) == before


def _rewrite(path: str, name: str, change: Callable[[Any], None]) -> None:
    """Apply ``change`` to the object in file ``name`` in place, save it back and record it in the manifest."""
    file = os.path.join(path, name)
    obj = torch.load(file, weights_only=True)
    change(obj)
    torch.save(obj, file)
    record(path, name)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "optimizer.bin", "scheduler.bin", "dl_state_dict_rank0.bin",
                                  "random_states_0.pkl", "custom_checkpoint_0.pkl"])
def test_a_file_that_would_run_code_is_refused_without_running_it(saved, tmp_path, name: str) -> None:
    marker = tmp_path / "ran"
    with open(os.path.join(saved, name), "wb") as f:
        f.write(torch_bytes({"state": CodeRunning(str(marker))}))
    record(saved, name)
    _refused(saved, r"could not load .* with torch.load\(weights_only=True\)")
    assert not marker.exists()


def test_python_gauss_of_another_type(saved) -> None:
    # random.setstate keeps any object as the cached gauss: it would break the first random.gauss() after resume
    _rewrite(saved, "random_states_0.pkl", lambda s: s["python"].update(gauss="x"))
    _refused(saved, r"RNG state cannot be restored \(TypeError: python 'gauss' is str")


def test_cuda_part_of_another_dtype(saved) -> None:
    # restored last, after the models: on a GPU machine a float tensor would fail there, half-way
    _rewrite(saved, "random_states_0.pkl", lambda s: s.update(cuda=[torch.zeros(16)]))
    _refused(saved, r"the CUDA part is a list, expected None or a list of 1-D uint8 tensors")


def test_loader_value_of_another_type(saved) -> None:
    # the real loader does int(state["epoch"]): a string would fail after the models were loaded
    _rewrite(saved, "dl_state_dict_rank0.bin", lambda s: s.update(epoch="one"))
    _refused(saved, r"dataloader 0: 'epoch' is str in the checkpoint, int here")


def test_loader_bool_for_an_int(saved) -> None:
    _rewrite(saved, "dl_state_dict_rank0.bin", lambda s: s.update(position=True))
    _refused(saved, r"dataloader 0: 'position' is bool in the checkpoint, int here")


def test_model_entry_of_another_dtype(saved) -> None:
    # load_state_dict would cast float64 to float32 silently: a checkpoint of another model
    _rewrite(saved, "pytorch_model.bin", lambda s: s.update({"2.bias": torch.zeros(2, dtype=torch.float64)}))
    _refused(saved, r"2.bias has dtype torch.float64 in the checkpoint, torch.float32 here; cast the model")


def test_a_manifest_that_is_a_link_out_of_the_folder(saved, tmp_path) -> None:
    outside = tmp_path / "manifest.json"
    os.replace(os.path.join(saved, MANIFEST_NAME), outside)
    os.symlink(outside, os.path.join(saved, MANIFEST_NAME))
    _refused(saved, r"manifest.json' is a symbolic link")


_CHILD = textwrap.dedent("""
    import resource, sys
    from notebook_accel.checkpointing import CheckpointError, load_state
    from tests.checkpointing.fakes import make_accelerator
    try:
        load_state(make_accelerator(seed=5), sys.argv[1])
        outcome = "loaded"
    except CheckpointError as e:
        outcome = "refused: " + str(e)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, outcome)
""")


def _load_in_child(path: str) -> tuple[int, str]:
    """Peak memory (KiB) of a fresh process that loads ``path``, and what happened."""
    done = subprocess.run([sys.executable, "-c", _CHILD, path], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    peak, outcome = done.stdout.strip().split(" ", 1)
    return int(peak), outcome


_CRAFT = textwrap.dedent("""
    import sys, zipfile, torch
    path = sys.argv[1]
    state = torch.load(path, weights_only=True)
    state["2.bias"] = torch.zeros(64 << 20)  # 256 MiB of zeros
    torch.save(state, path)
    with zipfile.ZipFile(path) as source:
        records = [(info.filename, source.read(info.filename)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:  # every record deflated: the file shrinks to ~250 KiB
        for name, data in records:
            target.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
""")


@pytest.mark.timeout(300)
def test_compressed_weights_are_refused_without_allocating_them(saved) -> None:
    baseline, outcome = _load_in_child(saved)
    assert outcome == "loaded"
    name = os.path.join(saved, "pytorch_model.bin")
    subprocess.run([sys.executable, "-c", _CRAFT, name], cwd=ROOT, check=True, timeout=120)  # 256 MiB: not here
    assert os.path.getsize(name) < 2 << 20
    record(saved, "pytorch_model.bin")
    peak, outcome = _load_in_child(saved)
    assert peak - baseline < 64 << 10, (baseline, peak, outcome)  # KiB: the 256 MiB tensor was never built
    assert outcome.startswith("refused: ") and "compressed tensor data" in outcome, outcome
