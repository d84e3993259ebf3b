"""Reading and writing config files (YAML, or JSON for a ``.json`` path, as accelerate does).

Every failure, from a missing file to a YAML syntax error (with its line and column) or a value of the wrong
type, becomes one :class:`ConfigError`; no input gives an internal traceback. Saving is atomic (a temporary
file renamed over the old one), so a crash never leaves half a config behind.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import yaml

from notebook_accel.config.accelerate_keys import UNSUPPORTED_KEYS, coerce_yaml_values, is_inactive, unknown_key_problem
from notebook_accel.config.errors import ConfigError, ConfigWarning
from notebook_accel.config.files import MAX_CONFIG_BYTES, config_file_path, read_regular_file
from notebook_accel.config.schema import FIELD_NAMES, OUR_FIELDS, OWN_SECTIONS, Config
from notebook_accel.config.validation import BOOL_FIELDS
from notebook_accel.errors import shown

__all__ = ["load_config", "save_config", "config_from_mapping", "config_to_dict", "config_to_yaml", "parse_config_text"]

PathLike = Union[str, "os.PathLike[str]"]

_HEADER = "# notebook-accel config (accelerate-compatible field names). Edit by hand, with\n" \
          "# `notebook-accel config`, or with notebook_accel.widgets.config_picker.ConfigPicker.\n"


class _StrictLoader(yaml.SafeLoader):
    """pyyaml's safe loader, noting keys set twice in one mapping (pyyaml silently keeps the last one)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Record repeated scalar keys with their lines, then build the mapping as pyyaml does."""
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # merge keys may repeat keys on purpose; complex keys are rejected by pyyaml itself
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in lines:
                self.duplicates.append(f"{key!r}: set twice, on lines {lines[key]} and {line}; keep one")
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


MAX_YAML_NODES = 10_000  # values in the document with aliases expanded (a 300-byte "billion laughs" has 10**8)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias is expanded (each shared node sized once)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a recursive alias counts once instead of looping
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    sizes[id(node)] = total
    return total


def parse_config_text(text: str, source: str | None = None, as_json: bool = False) -> Any:
    """Parse YAML (or JSON) text into Python data.

    A document whose aliases expand to more than :data:`MAX_YAML_NODES` values is refused before it is built.

    Raises:
        ConfigError: a syntax error, naming the line and column, or a document too large once expanded.
    """
    try:
        if as_json:
            return json.loads(text)
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None and (size := _expanded_size(node, {})) > MAX_YAML_NODES:
                raise ConfigError([f"the document expands to {size} values through its aliases (*name); a config "
                                   f"allows at most {MAX_YAML_NODES}: write the settings out plainly"], source)
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
        if loader.duplicates:
            raise ConfigError(loader.duplicates, source)
        return data
    except ConfigError:
        raise
    except json.JSONDecodeError as e:
        raise ConfigError([f"JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}"], source) from e
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = e.problem or e.context or "invalid YAML"
        raise ConfigError([f"YAML syntax error{where}: {what}"], source) from e
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as e:
        # pyyaml raises plain ValueError for impossible dates such as 2024-13-45, RecursionError for deep nesting
        raise ConfigError([f"cannot read the file as YAML: {type(e).__name__}: {e}"], source) from e


_MAX_INT_BITS = 4096  # about 1,200 digits: far past any setting; Python writes no int past 4,300 digits


def _huge_integer(value: Any, depth: int = 0) -> int | None:
    """The bit length of the first integer in ``value`` (nested lists and dicts included) too large for any
    setting, else ``None``. Parsed documents are bounded (:data:`MAX_YAML_NODES`), so the walk is too."""
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        return value.bit_length()
    if depth < 64 and isinstance(value, (list, tuple, dict)):
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        for item in items:
            bits = _huge_integer(item, depth + 1)
            if bits is not None:
                return bits
    return None


def config_from_mapping(data: Any, source: str | None = None) -> Config:
    """Build a :class:`Config` from parsed file data (a mapping of setting names to values).

    Known accelerate settings we do not use go to :attr:`Config.extra`; one :class:`ConfigWarning` lists those
    that are set. Unknown keys are problems with a "did you mean" suggestion.

    Raises:
        ConfigError: with every problem found.
    """
    if data is None:
        raise ConfigError(["the file is empty; expected settings such as 'num_processes: 2' "
                           "(write one with `notebook-accel config`)"], source)
    if not isinstance(data, Mapping):
        raise ConfigError([f"the top level must be a mapping of settings (name: value), got {type(data).__name__}"],
                          source)
    ours: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if key in FIELD_NAMES:
            ours[key] = value
        elif key in OWN_SECTIONS:  # ours (cluster:), kept with the file's other sections
            extra[key] = value
        elif key in UNSUPPORTED_KEYS:
            extra[key] = value
            bits = _huge_integer(value)
            if bits is not None:
                problems.append(f"{key}: holds an integer of {bits} bits, which no setting takes (nor can it be "
                                "written back to a file); remove the key or fix the number")
        else:
            problems.append(unknown_key_problem(key, FIELD_NAMES))
    try:
        config = Config(**coerce_yaml_values(ours, BOOL_FIELDS), extra=extra)
    except ConfigError as e:
        problems += e.problems
    if problems:
        raise ConfigError(problems, source)
    used = {"FSDP": ("fsdp_config",), "DEEPSPEED": ("deepspeed_config",)}.get(str(config.distributed_type), ())
    used = (*used, *OWN_SECTIONS, *(("fp8_config",) if config.mixed_precision == "fp8" else ()))
    _warn_unsupported({k: v for k, v in config.extra.items() if k not in used}, source)
    return config


def _warn_unsupported(extra: Mapping[str, Any], source: str | None) -> None:
    """One warning naming the accelerate settings that are set but ignored here."""
    active = sorted(k for k, v in extra.items() if not is_inactive(v))
    if active:
        where = f" {source}" if source else ""
        warnings.warn(
            f"config{where} sets accelerate options notebook-accel does not use: {', '.join(active)}. They are kept "
            "when the file is saved again but have no effect here (notebook-accel runs DDP, FSDP with "
            "distributed_type: FSDP, or DeepSpeed with distributed_type: DEEPSPEED); remove them to silence this "
            "warning.",
            ConfigWarning,
            stacklevel=3,
        )


def load_config(path: PathLike) -> Config:
    """Load a config file written by notebook-accel or by ``accelerate config`` (YAML, or JSON for ``.json``).

    Args:
        path: the file.

    Returns:
        The validated :class:`Config`.

    Raises:
        ConfigError: the file is missing or unreadable, is not valid YAML (the line is named), or holds invalid
            or unknown settings (every problem listed).

    Example:
        >>> config = load_config("~/.config/notebook_accel/config.yaml")   # doctest: +SKIP
    """
    file = config_file_path(path)
    source = str(file)
    try:
        text = read_regular_file(file).decode("utf-8")
    except FileNotFoundError as e:
        raise ConfigError([f"no config file at {source}; write one with `notebook-accel config "
                           f"--config_file {source}` or check the path"], source) from e
    except IsADirectoryError as e:
        raise ConfigError([f"{source} is a folder, not a config file"], source) from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([f"cannot read {source}: {e}"], source) from e
    key = (source, text)
    parsed = _PARSED.get(key)
    if parsed is None:  # each launch reads the default file: parse its YAML again only when its text changed
        parsed = parse_config_text(text, source, as_json=file.suffix.lower() == ".json")
        if len(_PARSED) >= 16:
            _PARSED.clear()
        _PARSED[key] = parsed
    return config_from_mapping(copy.deepcopy(parsed), source)  # checked (and warned about) at every load


_PARSED: dict[tuple[str, str], Any] = {}  # (path, text) -> the parsed YAML


def config_to_dict(config: Config) -> dict[str, Any]:
    """The settings to write: every field that is not ``None``, our own fields only when not default, and the
    kept accelerate settings."""
    defaults = Config()
    out: dict[str, Any] = {}
    for name in FIELD_NAMES:
        value = getattr(config, name)
        if value is None or (name in OUR_FIELDS and value == getattr(defaults, name)):
            continue
        out[name] = value
    out.update(config.extra)
    return dict(sorted(out.items()))


def config_to_yaml(config: Config) -> str:
    """The YAML text :func:`save_config` writes for ``config`` (its header comment included).

    Example:
        >>> "num_processes: 2" in config_to_yaml(Config(num_processes=2, use_cpu=True))
        True
    """
    return _HEADER + yaml.safe_dump(config_to_dict(config), sort_keys=False, default_flow_style=False)


def save_config(config: Config, path: PathLike) -> Path:
    """Write ``config`` to ``path`` (YAML, or JSON for ``.json``), creating folders; atomic.

    Returns:
        The path written.

    Raises:
        ConfigError: ``config`` is not a Config, ``path`` is not a path, names a device, pipe, socket or folder,
            or the file cannot be written (the OS error is named).

    Example:
        >>> save_config(Config(num_processes=2, use_cpu=True), tmp_path / "config.yaml")   # doctest: +SKIP
    """
    if not isinstance(config, Config):
        raise ConfigError([f"config: got {shown(config)} ({type(config).__name__}); allowed: a Config (e.g. "
                           "load_config(path), or Config(num_processes=2))"])
    file = config_file_path(path)
    try:
        existing = os.stat(file).st_mode
    except OSError:
        existing = None  # nothing there yet (or unreachable: the write below says why)
    if existing is not None and not stat.S_ISREG(existing):  # os.replace would put the file in a device's place
        what = "a folder" if stat.S_ISDIR(existing) else "a device, pipe or socket"
        raise ConfigError([f"cannot write the config to {file}: it is {what}, not a file; give the path of a "
                           "config file"], str(file))
    if file.suffix.lower() == ".json":
        text = json.dumps(config_to_dict(config), indent=2) + "\n"
    else:
        text = config_to_yaml(config)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, file)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise ConfigError([f"cannot write the config to {file}: {e}"], str(file)) from e
    return file
