"""A seeded fuzzer over mutated YAML text and values: every input gives a Config or a ConfigError, nothing else;
loads from files leave no descriptor, environment change or signal handler behind.

hypothesis is not a dependency, so this is a small hand-written mutator; the seed is fixed so a failure
reproduces, and the case is printed in the assertion message.
"""

from __future__ import annotations

import math
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from notebook_accel.config import Config, ConfigError, load_config, save_config
from notebook_accel.config.io import MAX_CONFIG_BYTES, config_from_mapping, config_to_dict, parse_config_text
from notebook_accel.errors import shown
from tests.helpers import process_state

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = [p.read_text() for p in sorted(FIXTURES.glob("*.yaml"))]
YAML_BITS = [":", "-", "[", "]", "{", "}", ",", "'", '"', "#", "&a", "*a", "!!python/object:os.system", "?", "|",
             ">", "\t", "\n", "  ", "%YAML 1.1\n", "---\n", "...", "!!binary", "NO", "no", "~", "0x1F", "1e9", "\x00",
             "2024-13-45", "<<: *a", "\u2028", "\ufeff"]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    """A value of a random type, including the awkward ones (nan, huge ints, nested containers)."""
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2, 7, 65535, 65536, 2**70, -(2**70), 16**5000])  # the last: no decimal repr
    if kind == 3:
        return rng.choice([0.5, -0.0, math.inf, -math.inf, math.nan, 1e308])
    if kind in (4, 5):
        return rng.choice(["", "no", "NO", "all", "0,1", "0,0", "bf16", "fp16", "MULTI_GPU", "x" * 300, "10.0.0.1",
                           "static", "c10d", "main", "é", " ", "0, 1, 2"])
    if kind == 6:
        return rng.randrange(-3, 10)
    if kind == 7:
        return "".join(rng.choice("abc01,_ -") for _ in range(rng.randrange(6)))
    if kind in (8, 9):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["a", "ipex", "num_processes", 1]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}


def _mutate_text(rng: random.Random, text: str) -> str:
    """Apply 1-4 random edits: insert a YAML-significant piece, delete a span, swap or duplicate lines, truncate."""
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        pos = rng.randrange(len(text) + 1)
        if op == 0:
            text = text[:pos] + rng.choice(YAML_BITS) + text[pos:]
        elif op == 1:
            text = text[:pos] + text[pos + rng.randint(1, 20):]
        elif op == 2:
            lines = text.splitlines(keepends=True)
            if len(lines) > 1:
                i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
                text = "".join(lines)
        elif op == 3:
            lines = text.splitlines(keepends=True)
            if lines:
                text += rng.choice(lines)
        else:
            text = text[:pos]
    return text


def _check(outcome: Any, case: str) -> None:
    """A successful load must round-trip through YAML text."""
    if isinstance(outcome, Config):
        text = yaml.safe_dump(config_to_dict(outcome))
        again = config_from_mapping(parse_config_text(text))
        assert again == outcome, case


def _load_text(text: str) -> Config | ConfigError:
    try:
        return config_from_mapping(parse_config_text(text))
    except ConfigError as e:
        return e


@pytest.mark.timeout(120)
def test_mutated_yaml_text_never_gives_a_traceback() -> None:
    rng = random.Random(20261121)
    outcomes = {"config": 0, "error": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(1500):
            text = _mutate_text(rng, rng.choice(SEEDS))
            case = f"case {i}: {text!r}"
            try:
                outcome = _load_text(text)
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{type(e).__name__}: {e}\n{case}") from e
            _check(outcome, case)
            outcomes["config" if isinstance(outcome, Config) else "error"] += 1
    assert outcomes["config"] > 50 and outcomes["error"] > 50, outcomes  # the mutator explores both sides


@pytest.mark.timeout(120)
def test_mutated_json_text_never_gives_a_traceback() -> None:
    rng = random.Random(5)
    seed = (FIXTURES / "accelerate_default.json").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(500):
            text = _mutate_text(rng, seed)
            try:
                config_from_mapping(parse_config_text(text, as_json=True))
            except ConfigError:
                pass
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{type(e).__name__}: {e}\ncase {i}: {text!r}") from e


@pytest.mark.timeout(120)
def test_random_values_never_give_a_traceback() -> None:
    rng = random.Random(7)
    base = yaml.safe_load(SEEDS[0])
    keys = list(base) + ["num_proceses", "", "fsdp_config", "deepspeed_config"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2000):
            data = dict(base)
            for _ in range(rng.randint(1, 3)):
                data[rng.choice(keys)] = _random_value(rng)
            case = f"case {i}: {shown(data, 2000)}"
            try:
                outcome: Config | ConfigError = config_from_mapping(data)
            except ConfigError as e:
                outcome = e
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{type(e).__name__}: {e}\n{case}") from e
            if isinstance(outcome, ConfigError):
                assert outcome.problems and all(isinstance(p, str) and p for p in outcome.problems), case
            _check(outcome, case)


@pytest.mark.parametrize(
    "text",
    ["[" * 5000, "a: " + "{b: " * 3000, "&a [*a]", "a: !!python/object/apply:os.system ['true']", "\x00\x01",
     "a: &x [1]\nb: *x\n" * 3, "num_processes: .nan", "num_processes: 0x" + "f" * 5000, "? 0x" + "f" * 5000 + "\n: 1",
     "gpu_ids: [0x" + "f" * 5000 + "]"],
)
def test_hostile_inputs_give_config_errors(text: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_config(path)


def test_saved_fuzz_winner_loads(tmp_path: Path) -> None:
    config = Config(num_processes=4, use_cpu=True, mixed_precision="bf16", gpu_ids=[0, 1], per_device_batch_size=3)
    assert load_config(save_config(config, tmp_path / "c.yaml")) == config


def _alias_document(rng: random.Random) -> str:
    """A YAML document that defines a few anchors and uses them (sometimes nested, sometimes a bomb, sometimes
    recursive or undefined), under real and accelerate-only keys."""
    lines: list[str] = []
    anchors: list[str] = []
    for i in range(rng.randint(1, 9)):
        width = rng.choice([1, 2, 9, 30])
        items = [f"*{rng.choice(anchors)}" if anchors and rng.random() < 0.8 else str(rng.randrange(9))
                 for _ in range(width)]
        if rng.random() < 0.05:
            items.append(f"*x{i}")  # refers to itself
        if rng.random() < 0.05:
            items.append("*undefined")
        body = f"[{', '.join(items)}]" if rng.random() < 0.7 else "{" + ", ".join(
            f"k{j}: {item}" for j, item in enumerate(items)) + "}"
        lines.append(f"  a{i}: &x{i} {body}")
        anchors.append(f"x{i}")
    key = rng.choice(["num_processes", "ipex_config", "fsdp_config", "gpu_ids", "<<"])
    use = f"*{rng.choice(anchors)}"
    return "fsdp_config:\n" + "\n".join(lines) + f"\n{key}: {use}\nuse_cpu: true\n"


@pytest.mark.timeout(60)
def test_aliases_and_anchors_never_hang_or_give_a_traceback(tmp_path: Path) -> None:
    """Random alias graphs (bombs up to 30**9 values, self references, merge keys) through load_config: each
    one a Config or a ConfigError within a second."""
    rng = random.Random(1121)
    path = tmp_path / "c.yaml"
    seen = {"config": 0, "error": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(300):
            text = _alias_document(rng)
            path.write_text(text)
            before = process_state()
            start = time.perf_counter()
            try:
                outcome: Config | ConfigError = load_config(path)
            except ConfigError as e:
                outcome = e
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{type(e).__name__}: {e}\ncase {i}: {text!r}") from e
            assert time.perf_counter() - start < 1.0, f"case {i} took too long: {text!r}"
            assert before.leaks(process_state()) == [], f"case {i}: {text!r}"
            seen["config" if isinstance(outcome, Config) else "error"] += 1
    assert seen["config"] > 10 and seen["error"] > 10, seen


@pytest.mark.timeout(30)
def test_file_kinds_never_hang_or_give_a_traceback(tmp_path: Path) -> None:
    """Things that are not config files, and files at the size limit: each a ConfigError, quickly."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (MAX_CONFIG_BYTES - 3) + "\n")  # exactly at the limit: read, then a clear error
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 64)
    for path in (fifo, link, tmp_path, big, binary, Path("/dev/zero"), Path("/dev/urandom"), Path("/proc/self/mem")):
        before = process_state()
        start = time.perf_counter()
        with pytest.raises(ConfigError):
            load_config(path)
        assert time.perf_counter() - start < 2.0, path
        assert before.leaks(process_state()) == [], path
