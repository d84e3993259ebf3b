"""The config error (every problem at once) and the warning for accelerate settings we keep but do not use."""

from __future__ import annotations

from collections.abc import Iterable

from notebook_accel.ipython_tracebacks import IPythonTraceback
from notebook_accel.plugins import ConfigurationError

__all__ = ["ConfigError", "ConfigWarning"]


class ConfigError(ConfigurationError):
    """A config (a file, a mapping or constructor arguments) is invalid.

    Raised once with every problem found, each naming the field, the bad value and what is allowed. It is the
    :class:`~notebook_accel.plugins.ConfigurationError` (a bad option) of a whole run configuration; like it, a
    :class:`~notebook_accel.errors.NotebookAccelError` and a ``ValueError``.

    Attributes:
        problems: one line per problem, e.g. ``"num_processes: got 0; allowed: a whole number >= 1"``.
        source: where the config came from (a file path), or ``None``.

    Example:
        >>> try:
        ...     Config(num_processes=0, mixed_precision="fp32")
        ... except ConfigError as e:
        ...     len(e.problems)
        2
    """

    def __init__(self, problems: Iterable[str], source: str | None = None) -> None:
        self.problems: list[str] = list(problems) or ["unknown problem"]
        self.source = source
        where = f" in {source}" if source else ""
        count = len(self.problems)
        head = f"invalid notebook-accel config{where}: {count} problem{'s' if count != 1 else ''}"
        super().__init__(head + "\n" + "\n".join(f"  - {p}" for p in self.problems))
        self._render_traceback_ = IPythonTraceback(self)  # in a notebook: the user's cell and this message

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[str], str | None]]:
        """Pickle with the problems (the default would pass the joined message as ``problems``)."""
        return (type(self), (self.problems, self.source))


class ConfigWarning(UserWarning):
    """A config file holds accelerate settings (DeepSpeed, FSDP, TPU, ...) that notebook-accel keeps but ignores."""
