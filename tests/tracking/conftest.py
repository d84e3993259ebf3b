"""Fixtures for tracker tests: a real event channel (a pipe with an installed EventWriter)."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from notebook_accel import channel
from notebook_accel.events import Event


class Channel:
    """The kernel's end of a channel whose writer is installed in this process."""

    def __init__(self, reader: Connection, writer: channel.EventWriter) -> None:
        self.reader = reader
        self.writer = writer

    def drain(self, timeout: float = 5.0) -> list[Event]:
        """Flush the writer and read every event that arrives within ``timeout``."""
        self.writer.flush()
        out: list[Event] = []
        deadline = time.monotonic() + timeout
        while self.reader.poll(0.05 if out else max(deadline - time.monotonic(), 0)):
            out.extend(channel.read_events(self.reader))
            if time.monotonic() > deadline:
                break
        return out


@pytest.fixture
def live_channel() -> Iterator[Channel]:
    """Install an EventWriter over a real pipe for the test; uninstall and close it afterwards."""
    reader, conn = mp.Pipe(duplex=False)
    writer = channel.EventWriter(conn, flush_interval=0.02)
    channel.install(writer)
    try:
        yield Channel(reader, writer)
    finally:
        channel.uninstall()
        writer.close()
        reader.close()


PACKAGE_TRACKERS = ("wandb", "mlflow", "comet_ml", "aim", "dvclive")


@pytest.fixture
def without_package_trackers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make log_with="all" see none of the packages of wandb, mlflow, comet_ml, aim and dvclive (they would try
    to reach their services); jsonl and tensorboard are unaffected."""
    from notebook_accel.tracking import registry

    real = registry.package_available
    monkeypatch.setattr(registry, "package_available", lambda name: name not in PACKAGE_TRACKERS and real(name))
