"""accelerate's ``get_logger``: a standard ``logging`` logger that knows which process it runs in.

``logger.info(msg)`` logs on the main process only (``main_process_only=True`` is the default), with
``main_process_only=False`` on every process, and with ``in_order=True`` on every process one rank after the other
(rank 0 first; each rank waits at a barrier for the ones before it, so every process must make the call). Each
message starts with ``[RANK <r>] ``, as accelerate's does. The rank is torch's once a process group exists (an
``Accelerator`` or ``PartialState`` formed it), else the launch environment's; a process of a multi-process run
that logs before the group exists is refused, since it could not wait for the others.

Example:
    >>> from notebook_accel.logging import get_logger
    >>> logger = get_logger(__name__, log_level="INFO")
    >>> logger.info("loaded %d rows", 1000)                    # main process only
    >>> logger.info("my shard is ready", main_process_only=False)
    >>> logger.info("rank by rank", in_order=True)              # collective: every rank calls it
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import torch.distributed as dist

from notebook_accel import environment
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import NotebookAccelError, shown
from notebook_accel.plugins import ConfigurationError

__all__ = ["MultiProcessAdapter", "get_logger", "LoggingStateError", "LOG_LEVEL_VARIABLE", "LIBRARY_LOGGER",
           "get_verbosity", "set_verbosity", "set_verbosity_debug", "set_verbosity_info", "set_verbosity_warning",
           "set_verbosity_error"]

#: accelerate's variable for the level of every logger made by :func:`get_logger` without ``log_level``.
LOG_LEVEL_VARIABLE = "ACCELERATE_LOG_LEVEL"


def _level_number(name: str) -> int | None:
    """The number of level ``name`` in any case (``"info"`` -> 20), or ``None`` when it names no level."""
    number = logging.getLevelName(name.strip().upper())
    return number if isinstance(number, int) else None


#: The logger of this library's own messages, whose level :func:`set_verbosity` sets (accelerate's is "accelerate").
LIBRARY_LOGGER = "notebook_accel"


def get_verbosity() -> int:
    """The effective level of this library's own logger (``logging.WARNING`` is 30), as accelerate 1.16's."""
    return logging.getLogger(LIBRARY_LOGGER).getEffectiveLevel()


def set_verbosity(verbosity: int | str) -> None:
    """Set the level of this library's own logger and of its children that do not set their own (accelerate
    1.16's, for the ``notebook_accel`` namespace); the root logger and other libraries' loggers are left alone.

    Args:
        verbosity: a ``logging`` level (``logging.INFO``) or its name in any case (``"info"``).

    Raises:
        ConfigurationError: not a level (the message lists the names).
    """
    level = _level_number(verbosity) if isinstance(verbosity, str) else verbosity
    if not isinstance(level, int) or isinstance(level, bool) or level < 0:
        raise ConfigurationError(f"set_verbosity({shown(verbosity)}): not a logging level; pass one of CRITICAL, "
                                 "ERROR, WARNING, INFO, DEBUG (any case) or a logging constant such as logging.INFO")
    logging.getLogger(LIBRARY_LOGGER).setLevel(level)


def set_verbosity_debug() -> None:
    """This library's own logger at ``DEBUG``."""
    set_verbosity(logging.DEBUG)


def set_verbosity_info() -> None:
    """This library's own logger at ``INFO``."""
    set_verbosity(logging.INFO)


def set_verbosity_warning() -> None:
    """This library's own logger at ``WARNING``."""
    set_verbosity(logging.WARNING)


def set_verbosity_error() -> None:
    """This library's own logger at ``ERROR``."""
    set_verbosity(logging.ERROR)


class LoggingStateError(NotebookAccelError, RuntimeError):
    """A process of a multi-process run logged before its process group was formed."""


def _rank_and_size() -> tuple[int, int]:
    """This process's rank and the run's size: torch's group when formed, else the launch environment's.

    Raises:
        LoggingStateError: the environment says several processes take part but no group is formed yet.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env = LaunchEnvironment.from_environ()
    if env.is_distributed:
        raise LoggingStateError(
            f"get_logger(...).log: this process is rank {env.rank} of {env.world_size} (WORLD_SIZE={env.world_size}) "
            "but no process group is formed yet, so it cannot tell whether to log or wait for the other ranks; "
            "create the Accelerator() (or PartialState()) before the first log call")
    return 0, 1


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``logging.LoggerAdapter`` whose calls take ``main_process_only`` (default ``True``) and ``in_order``
    (default ``False``; when ``True``, ``main_process_only`` is ignored and every rank logs in rank order).

    Made by :func:`get_logger`; every ``logging`` method (``debug``, ``info``, ``warning``, ``error``,
    ``exception``, ``critical``, ``log``) goes through :meth:`log`.
    """

    def __init__(self, logger: logging.Logger, extra: MutableMapping[str, object] | None = None) -> None:
        super().__init__(logger, extra or {})
        self._warned: set[str] = set()

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """Prefix the message with ``[RANK <r>]`` and point the record at the caller's line, not this module's
        (a ``stacklevel`` of the caller's own is kept)."""
        msg, kwargs = super().process(msg, kwargs)
        kwargs.setdefault("stacklevel", 2)
        return f"[RANK {_rank_and_size()[0]}] {msg}", kwargs

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """Log ``msg`` at ``level`` on the main process (``main_process_only=True``, the default), on every process
        (``main_process_only=False``), or on every process in rank order (``in_order=True``, a collective: each
        rank calls it); the other keyword arguments are ``logging``'s.

        Raises:
            LoggingStateError: a rank of a multi-process run logs before the process group is formed.
        """
        main_process_only = bool(kwargs.pop("main_process_only", True))
        in_order = bool(kwargs.pop("in_order", False))
        if not self.isEnabledFor(level):
            return
        rank, size = _rank_and_size()
        text, options = self.process(msg, kwargs)
        if not in_order:
            if rank == 0 or not main_process_only:
                self.logger.log(level, text, *args, **options)
            return
        for turn in range(size):
            if turn == rank:
                self.logger.log(level, text, *args, **options)
            if size > 1:
                dist.barrier()

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning(...)``, but a call with the same arguments as an earlier one logs nothing."""
        key = repr((args, sorted(kwargs.items())))
        if key not in self._warned:
            self._warned.add(key)
            self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """A multi-process-aware logger for ``name`` (see the module docstring for its calls).

    Args:
        name: the ``logging`` logger's name, usually ``__name__``.
        log_level: a level name (``"DEBUG"``, ``"info"``, ...) set on this logger and on the root logger, as
            accelerate does; ``None`` takes ``ACCELERATE_LOG_LEVEL`` when set, else leaves both levels alone.

    Returns:
        A :class:`MultiProcessAdapter` around ``logging.getLogger(name)``.

    Raises:
        ConfigurationError: ``log_level`` (or ``ACCELERATE_LOG_LEVEL``) is not a level name.

    Example:
        >>> get_logger("train", log_level="DEBUG").logger.level == logging.DEBUG
        True
    """
    level = log_level if log_level is not None else environment.get(LOG_LEVEL_VARIABLE)
    logger = logging.getLogger(name)
    if level is not None:
        if not isinstance(level, str) or _level_number(level) is None:
            source = "log_level" if log_level is not None else LOG_LEVEL_VARIABLE
            raise ConfigurationError(f"get_logger({name!r}): {source}={shown(level)} is not a logging level; "
                                     "allowed: CRITICAL, ERROR, WARNING, INFO, DEBUG (any case)")
        logger.setLevel(level.upper())
        logger.root.setLevel(level.upper())
    return MultiProcessAdapter(logger, {})
