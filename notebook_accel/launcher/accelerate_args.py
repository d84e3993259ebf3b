"""accelerate's ``notebook_launcher`` arguments that have no counterpart in a fork-based launcher, checked.

accelerate's launcher runs torch's elastic agent, so its signature carries rendezvous and restart options.
Code written for it passes them; here each is checked like any other argument and either used (the
endpoint, ``join_timeout``, ``max_restarts``, the line prefix) or accepted with its effect documented.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from notebook_accel.errors import LaunchError, shown

__all__ = ["Rendezvous", "check_rendezvous", "check_max_restarts", "check_prefix_template", "RDZV_BACKENDS"]

RDZV_BACKENDS = ("static", "c10d")
_RDZV_CONF_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "read_timeout", "timeout", "is_host",
                   "keep_alive_interval", "keep_alive_max_attempt")
DEFAULT_KEEP_ALIVE = (5.0, 3)  # torch's c10d rendezvous defaults: a node is lost after 3 missed 5 s beats
DEFAULT_JOIN_TIMEOUT = 1800.0
MIN_JOIN_TIMEOUT = 1.0  # shorter, the store's own operations time out before any worker could join
MAX_JOIN_TIMEOUT = 7 * 24 * 3600.0  # a week; beyond that torch's timedelta arithmetic overflows sooner or later
MAX_PREFIX = 200  # characters of a filled line prefix (and at most that width or precision per field)


@dataclass(frozen=True)
class Rendezvous:
    """What the rendezvous arguments decide: node 0's address and port (if the endpoint named them) and how
    long a worker may wait for the others."""

    endpoint_host: str | None
    endpoint_port: int | None
    join_timeout: float
    keep_alive_interval: float = DEFAULT_KEEP_ALIVE[0]
    keep_alive_max_attempt: int = DEFAULT_KEEP_ALIVE[1]


def _endpoint(value: str) -> tuple[str | None, int | None]:
    """``"host"``, ``"host:port"`` or ``"[v6]:port"`` -> (host, port); ``""`` -> (None, None)."""
    text = value.strip()
    if not text:
        return None, None
    host, port = text, None
    if text.startswith("["):
        close = text.find("]")
        host, rest = text[1:close], text[close + 1:]
        port = rest[1:] if rest.startswith(":") else None
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or (port is not None and not (port.isdigit() and 0 < int(port) < 65536)):
        raise LaunchError(
            f"rdzv_endpoint={shown(value)} is not host[:port]; pass node 0's address, e.g. '10.0.0.1:29500', or ''"
        )
    return host, None if port is None else int(port)


def check_rendezvous(
    backend: object, endpoint: object, conf: object, rdzv_id: object, monitor_interval: object
) -> Rendezvous:
    """Check accelerate's rendezvous arguments; raises :class:`LaunchError` naming the bad one."""
    if backend not in RDZV_BACKENDS:
        raise LaunchError(
            f"rdzv_backend={shown(backend)} is not supported; use one of {list(RDZV_BACKENDS)} (node 0's kernel serves "
            "the rendezvous itself; an etcd server is not used)"
        )
    if not isinstance(endpoint, str):
        raise LaunchError(f"rdzv_endpoint={shown(endpoint)} is not allowed; pass 'host[:port]' of node 0, or ''")
    if not isinstance(rdzv_id, str):
        raise LaunchError(f"rdzv_id={shown(rdzv_id)} is not allowed; pass a string (it is only recorded)")
    if isinstance(monitor_interval, bool) or not isinstance(monitor_interval, (int, float)) or not (
            0 < monitor_interval < math.inf):
        raise LaunchError(f"monitor_interval={shown(monitor_interval)} is not allowed; pass a number of seconds > 0")
    if conf is not None and not isinstance(conf, Mapping):
        raise LaunchError(f"rdzv_conf={shown(conf, 80)} is not allowed; pass a dict such as {{'join_timeout': 600}}")
    options = dict(conf or {})
    unknown = sorted(str(k) for k in options if k not in _RDZV_CONF_KEYS)
    if unknown:
        raise LaunchError(f"rdzv_conf has unknown keys {unknown}; allowed keys are {list(_RDZV_CONF_KEYS)}")
    join = options.get("join_timeout", DEFAULT_JOIN_TIMEOUT)
    try:
        seconds = math.nan if isinstance(join, bool) or not isinstance(join, (int, float)) else float(join)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not MIN_JOIN_TIMEOUT <= seconds <= MAX_JOIN_TIMEOUT:
        raise LaunchError(
            f"rdzv_conf join_timeout={shown(join)} is not allowed; pass a number of seconds from "
            f"{MIN_JOIN_TIMEOUT:g} (workers need that long to start) to {MAX_JOIN_TIMEOUT:g} (a week), e.g. 600")
    interval = options.get("keep_alive_interval", DEFAULT_KEEP_ALIVE[0])
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.1 <= interval <= 3600:
        raise LaunchError(f"rdzv_conf keep_alive_interval={shown(interval)} is not allowed; pass seconds between "
                          "heartbeats of the nodes, from 0.1 to 3600 (default 5)")
    attempts = options.get("keep_alive_max_attempt", DEFAULT_KEEP_ALIVE[1])
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
        raise LaunchError(f"rdzv_conf keep_alive_max_attempt={shown(attempts)} is not allowed; pass how many "
                          "heartbeats a node may miss before it counts as lost, a whole number from 1 to 1000 "
                          "(default 3)")
    host, port = _endpoint(endpoint)
    return Rendezvous(host, port, seconds, float(interval), attempts)


def check_max_restarts(value: object) -> int:
    """``max_restarts`` as an int from 0 to 100."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise LaunchError(f"max_restarts={shown(value)} is not allowed; pass a whole number from 0 (no restart) to 100")
    return value


def check_prefix_template(value: object) -> str | None:
    """A console line prefix with ``{rank}``/``{local_rank}`` (torchrun's ``${rank}`` accepted), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise LaunchError(
            f"log_line_prefix_template={shown(value)} is not allowed; pass a string such as '[{{rank}}] '")
    template = value.replace("${rank}", "{rank}").replace("${local_rank}", "{local_rank}").replace(
        "${role_name}", "worker")
    try:
        _check_widths(template)
        filled = template.format(rank=99999, local_rank=99999)
    except (KeyError, IndexError, ValueError) as e:
        raise LaunchError(
            f"log_line_prefix_template={shown(value)} cannot be filled ({type(e).__name__}: {e}); use the fields "
            "{rank} and {local_rank}, e.g. '[{rank}] '"
        ) from e
    if len(filled) > MAX_PREFIX:
        raise LaunchError(
            f"log_line_prefix_template={shown(value)} makes a prefix of {len(filled)} characters; at most "
            f"{MAX_PREFIX} are allowed, e.g. '[{{rank}}] '")
    return template


def _check_widths(template: str) -> None:
    """Raise ``ValueError`` for a field whose width or precision exceeds :data:`MAX_PREFIX` (``{rank:>400000000}``
    would fill gigabytes before any length check could run)."""
    for _, field, spec, _ in string.Formatter().parse(template):
        if spec and "{" in spec:
            raise ValueError(f"the field {{{field}:{spec}}} has a field inside its format; use a fixed width")
        numbers = [int(n) for n in re.findall(r"\d+", spec or "")]
        if field is not None and numbers and max(numbers) > MAX_PREFIX:
            raise ValueError(f"the field {{{field}:{spec}}} asks for {max(numbers)} characters, at most "
                             f"{MAX_PREFIX} are allowed")
