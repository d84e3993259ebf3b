"""Reading and writing config files: accelerate's files, round trips, syntax errors, warnings."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest
import yaml

from notebook_accel.config import Config, ConfigError, ConfigWarning, load_config, save_config
from notebook_accel.config.io import config_from_mapping, config_to_dict

FIXTURES = Path(__file__).parent / "fixtures"
ACCELERATE_FILES = sorted(p.name for p in FIXTURES.iterdir())


def _load_quietly(path: Path) -> Config:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(path)


def test_accelerate_single_gpu_file() -> None:
    config = load_config(FIXTURES / "accelerate_single_gpu.yaml")
    assert (config.distributed_type, config.num_processes, config.gpu_ids) == ("NO", 1, "0")
    assert (config.mixed_precision, config.downcast_bf16, config.use_cpu) == ("fp16", False, False)
    assert config.extra == {"tpu_env": [], "tpu_use_cluster": False, "tpu_use_sudo": False}


def test_accelerate_multi_gpu_file() -> None:
    config = load_config(FIXTURES / "accelerate_multi_gpu.yaml")
    assert (config.distributed_type, config.num_processes, config.gpu_ids, config.mixed_precision) == (
        "MULTI_GPU", 2, "all", "bf16")


def test_accelerate_cpu_file() -> None:
    config = load_config(FIXTURES / "accelerate_cpu.yaml")
    assert (config.distributed_type, config.num_processes, config.use_cpu) == ("MULTI_CPU", 4, True)
    assert (config.main_process_ip, config.main_process_port) == ("127.0.0.1", 29500)
    assert config.extra["ipex_config"] == {"ipex": False}


def test_accelerate_multi_node_file() -> None:
    config = load_config(FIXTURES / "accelerate_multi_node.yaml")
    assert (config.num_machines, config.machine_rank, config.processes_per_machine) == (2, 1, 8)
    assert (config.rdzv_backend, config.main_process_ip) == ("c10d", "192.168.1.10")


def test_accelerate_default_json_file() -> None:
    config = load_config(FIXTURES / "accelerate_default.json")
    assert config == Config(same_network=False)


@pytest.mark.parametrize("name", ACCELERATE_FILES)
def test_round_trip_keeps_every_setting(name: str, tmp_path: Path) -> None:
    source = FIXTURES / name
    first = _load_quietly(source)
    out = save_config(first, tmp_path / name)
    second = _load_quietly(out)
    assert second == first and second.extra == first.extra
    original = json.loads(source.read_text()) if name.endswith(".json") else yaml.safe_load(source.read_text())
    written = json.loads(out.read_text()) if name.endswith(".json") else yaml.safe_load(out.read_text())
    # every key survives; only accelerate's string form of downcast_bf16 becomes a real boolean
    assert set(original) <= set(written)
    assert written["downcast_bf16"] is False


def test_saved_file_is_plain_yaml_with_quoted_no(tmp_path: Path) -> None:
    path = save_config(Config(), tmp_path / "sub" / "config.yaml")
    text = path.read_text()
    assert text.startswith("# notebook-accel config")
    assert "distributed_type: 'NO'" in text and "mixed_precision: 'no'" in text
    assert "gradient_accumulation_steps" not in text  # our own fields only when not default (accelerate-readable)
    assert "main_process_ip" not in text  # None is left out, as accelerate does
    custom = Config(gradient_accumulation_steps=4, per_device_batch_size=16)
    assert load_config(save_config(custom, path)) == custom


def test_unsupported_settings_give_one_warning_naming_them() -> None:
    with pytest.warns(ConfigWarning) as record:
        config = load_config(FIXTURES / "accelerate_dynamo_fsdp.yaml")
    assert len(record) == 1
    message = str(record[0].message)
    assert "dynamo_config, fsdp_config" in message and "kept" in message
    assert "tpu_env" not in message  # empty/false settings stay silent
    assert config.extra["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"


def test_inactive_unsupported_settings_are_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(FIXTURES / "accelerate_single_gpu.yaml")
        load_config(FIXTURES / "accelerate_cpu.yaml")


def test_yaml_11_readings_are_undone() -> None:
    config = config_from_mapping(yaml.safe_load(
        "distributed_type: NO\nmixed_precision: no\ndowncast_bf16: 'yes'\nuse_cpu: 'false'\ngpu_ids: 0\n"))
    assert (config.distributed_type, config.mixed_precision, config.downcast_bf16, config.gpu_ids) == (
        "NO", "no", True, "0")


def test_unknown_keys_are_errors_with_suggestions(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("num_process: 2\nmixed_precison: bf16\ncompletely_else: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = info.value.problems
    assert len(problems) == 3
    assert "did you mean 'num_processes'" in problems[0]
    assert "did you mean 'mixed_precision'" in problems[1]
    assert "did you mean" not in problems[2] and "known settings" in problems[2]
    assert str(path) in str(info.value)


def test_unknown_keys_and_bad_values_are_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("num_processes: 0\ndeepspeed_confg: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 2


def test_non_string_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="keys must be strings"):
        config_from_mapping({1: 2})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("num_processes: 2\nmixed_precision: [bf16\n", "YAML syntax error at line 3"),
        ("num_processes: 2\n  bad: indent\n", "YAML syntax error at line 2"),
        ("a: b: c\n", "line 1"),
        ("x: 2024-13-45\n", "cannot read the file as YAML"),
        ("", "the file is empty"),
        ("- 1\n- 2\n", "top level must be a mapping"),
        ("just a string\n", "got str"),
    ],
)
def test_unreadable_files_name_the_problem(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value)


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n  "num_processes": 2,\n}\n')
    with pytest.raises(ConfigError, match="JSON syntax error at line 3"):
        load_config(path)


def test_missing_file_folder_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config file at .*notebook-accel config"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(binary)


def test_save_into_a_path_below_a_file_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write"):
        save_config(Config(), blocker / "c.yaml")


def test_save_never_puts_a_file_in_place_of_a_device_pipe_or_folder(tmp_path: Path) -> None:
    import stat

    fifo, folder = tmp_path / "fifo.yaml", tmp_path / "folder.yaml"
    os.mkfifo(fifo)
    folder.mkdir()
    targets = [(fifo, stat.S_ISFIFO, "a device, pipe or socket"), (folder, stat.S_ISDIR, "a folder")]
    if os.geteuid() == 0:  # as root, the atomic replace once turned /dev/zero into a config file
        device = tmp_path / "null.yaml"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append((device, stat.S_ISCHR, "a device, pipe or socket"))
    for target, kind, words in targets:
        with pytest.raises(ConfigError, match=f"it is {words}, not a file"):
            save_config(Config(), target)
        assert kind(os.stat(target).st_mode), f"{target} was replaced"


def test_save_leaves_no_temporary_files(tmp_path: Path) -> None:
    save_config(Config(num_processes=2), tmp_path / "c.yaml")
    save_config(Config(num_processes=3), tmp_path / "c.yaml")
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]
    assert load_config(tmp_path / "c.yaml").num_processes == 3


def test_config_to_dict_is_sorted_and_includes_extra() -> None:
    data = config_to_dict(Config(extra={"fsdp_config": {}}))
    assert list(data) == sorted(data) and data["fsdp_config"] == {}


def test_keys_set_twice_are_errors_with_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("num_processes: 2\nuse_cpu: true\nnum_processes: 4\nfsdp_config:\n  a: 1\n  a: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == ["'num_processes': set twice, on lines 1 and 3; keep one",
                                   "'a': set twice, on lines 5 and 6; keep one"]


def test_merge_keys_may_repeat_a_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("fsdp_config:\n  base: &b {x: 1}\n  other:\n    <<: *b\n    x: 2\nnum_processes: 1\n")
    with pytest.warns(ConfigWarning):
        assert load_config(path).extra["fsdp_config"]["other"] == {"x": 2}


# -- hostile files (issue 11, item 7): refused quickly, with bounded memory ---------------------------------
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefg", "bcdefgh")
) + "num_processes: [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n"


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_BOMB)
    assert len(_BOMB) < 500
    started = time.process_time()
    with pytest.raises(ConfigError, match="expands to .* values through its aliases"):
        load_config(path)
    assert time.process_time() - started < 5, "the alias bomb was expanded (hang guard)"


def test_a_few_aliases_are_still_fine(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text("num_processes: &n 2\nnum_machines: 1\ngradient_accumulation_steps: *n\n")
    assert load_config(path).gradient_accumulation_steps == 2


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo"])
def test_non_regular_files_are_refused(tmp_path: Path, special: str) -> None:
    if special == "fifo":
        special = str(tmp_path / "config.fifo")
        os.mkfifo(special)  # no writer: a blocking open would hang
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(special)


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("num_processes: 2\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="a config file is at most"):
        load_config(path)


def test_a_huge_integer_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "digits.yaml"
    path.write_text("num_processes: " + "9" * 4000 + "\n")
    with pytest.raises(ConfigError, match="allowed: a whole number from 1 to 1000000") as info:
        load_config(path)
    assert len(str(info.value)) < 500


@pytest.mark.parametrize("text, words", [
    ("num_processes: 0x" + "f" * 5000, "num_processes: got <an integer of 20000 bits>"),
    ("gpu_ids: [0x" + "f" * 5000 + "]", "gpu_ids: got [<an integer of 20000 bits>]"),
    ("tpu_env: 0x" + "f" * 5000, "tpu_env: holds an integer of 20000 bits"),
    ("? 0x" + "f" * 5000 + "\n: 1", "<an integer of 20000 bits>"),  # an explicit key: no 1,024-character limit
], ids=["field", "gpu_ids", "accelerate-only key", "key"])
def test_an_integer_with_no_decimal_form_is_a_clear_error(tmp_path: Path, text: str, words: str) -> None:
    """Hex digits parse to an integer past Python's 4,300-digit repr limit: the error message that showed it raised
    ValueError instead (and an accelerate-only key kept it until save_config failed the same way)."""
    path = tmp_path / "hex.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value) and len(str(info.value)) < 1000
