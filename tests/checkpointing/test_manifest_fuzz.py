"""A seeded fuzzer over the manifest of a real checkpoint: every mutation gives a successful load or a
CheckpointError with the state unchanged, never another exception, never a hang.

The mutations replace, delete or add fields at any depth with values of any JSON type (huge numbers, deep nesting,
format patterns, paths out of the folder), or damage the text itself.
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from typing import Any

import pytest

from notebook_accel.checkpointing import CheckpointError, load_state, save_state
from notebook_accel.checkpointing.manifest import MANIFEST_NAME, read_manifest
from tests.checkpointing.fakes import fingerprint, make_accelerator, train_step

SEED = 20261124
CASES = 250
VALUES: list[Any] = [None, True, False, 0, -1, 1, 2, 10**30, 1.5, -0.0, 1e308, "", "x", "../x", "/etc/passwd",
                     "{rank:99999999}", "{rank}", "{0}", "a/{rank}", "model", "rng", [], {}, [1], {"size": 1},
                     {"size": 0, "sha256": "0" * 64}, "[" * 50]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into ``data`` (dicts and lists)."""
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, prefix + (i,))
    return out


def _mutate(rng: random.Random, data: dict[str, Any]) -> str:
    """The manifest text after 1-3 random edits."""
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(data)[1:])
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        op = rng.randrange(4)
        if op == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == 1 and isinstance(parent, dict):
            parent[rng.choice(["extra", "step", "files", "x"])] = rng.choice(VALUES)
        elif op == 2:
            parent[path[-1]] = [parent[path[-1]]] * rng.randint(0, 3)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(VALUES))
    text = json.dumps(data)
    if rng.random() < 0.1:
        text = rng.choice(["[" * 100_000, text[: rng.randrange(len(text))], text.replace("1", "9" * 5000, 1)])
    return text


@pytest.mark.timeout(120)
def test_mutated_manifests_load_or_give_a_checkpoint_error(tmp_path) -> None:
    acc = make_accelerator(seed=0)
    train_step(acc)
    path = save_state(acc, tmp_path / "ckpt")
    manifest_file = os.path.join(path, MANIFEST_NAME)
    with open(manifest_file) as f:
        good = json.load(f)
    rng = random.Random(SEED)
    target = make_accelerator(seed=3)
    outcomes = {"loaded": 0, "refused": 0}
    for index in range(CASES):
        text = _mutate(rng, good)
        with open(manifest_file, "w") as f:
            f.write(text)
        before = fingerprint(target)
        start = time.perf_counter()
        try:
            read_manifest(path)  # on its own too: load_state would wrap any exception into a CheckpointError
            load_state(target, path)
            outcomes["loaded"] += 1
        except CheckpointError:
            outcomes["refused"] += 1
            assert fingerprint(target) == before, f"case {index} changed the state: {text[:500]!r}"
        except Exception as e:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"case {index}: {type(e).__name__}: {e}\n{text[:500]!r}") from e
        assert time.perf_counter() - start < 2.0, f"case {index} took too long: {text[:500]!r}"
        assert sorted(os.listdir(tmp_path)) == ["ckpt"], f"case {index} wrote outside the checkpoint"
    assert outcomes["refused"] > CASES // 2 and outcomes["loaded"] > 5, outcomes
